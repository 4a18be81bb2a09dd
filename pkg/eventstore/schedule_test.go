package eventstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/pkg/natstest"
)

// What ADR 0026 relies on, measured on the embedded server: in a work-queue
// stream with message schedules, a schedule set again on its subject
// replaces the first; one purged never fires; one whose time has passed
// fires at once; schedules survive a restart of the server; a fired
// message keeps the schedule's body and headers, without Nats-Msg-Id and
// with Nats-Scheduler naming the schedule, and never comes before its
// (whole-second) time.
func TestMessageSchedulesAsADR0026Relies(t *testing.T) {
	dir := t.TempDir()
	ns := natstest.StartServer(t, dir)
	nc := natstest.Connect(t, ns.ClientURL())
	ctx := context.Background()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := jetstream.StreamConfig{Name: "PROBE", Subjects: []string{"probe.fired.>"}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage}
	if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// Enabled on an existing stream, as eventstore.Open does on upgrade.
	cfg.Subjects, cfg.AllowMsgSchedules = append(cfg.Subjects, "probe.at.>"), true
	if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
		t.Fatalf("enable schedules: %v", err)
	}
	at := time.Now().Add(2 * time.Second).Truncate(time.Second)
	set := func(name, body string, at time.Time) {
		t.Helper()
		m := nats.NewMsg("probe.at." + name)
		m.Data = []byte(body)
		m.Header.Set(jetstream.MsgIDHeader, "id-"+body)
		m.Header.Set("Content-Type", "application/json")
		if _, err := js.PublishMsg(ctx, m, jetstream.WithScheduleAt(at), jetstream.WithScheduleTarget("probe.fired."+name)); err != nil {
			t.Fatalf("schedule %s: %v", name, err)
		}
	}
	set("a", "first", at)
	set("a", "replaced", at)
	set("b", "b", at)
	set("c", "cancelled", at)
	set("past", "past", time.Now().Add(-time.Hour))
	st, err := js.Stream(ctx, "PROBE")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject("probe.at.c")); err != nil {
		t.Fatal(err)
	}

	nc.Close()
	ns.Shutdown()
	ns.WaitForShutdown()
	ns = natstest.StartServer(t, dir)
	if js, err = jetstream.New(natstest.Connect(t, ns.ClientURL())); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "PROBE", jetstream.ConsumerConfig{Durable: "probe", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "probe.fired.>"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for deadline := time.Now().Add(30 * time.Second); len(got) < 3 && time.Now().Before(deadline); {
		batch, err := cons.Fetch(3-len(got), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			got[m.Subject()] = string(m.Data())
			h := m.Headers()
			if h.Get(jetstream.MsgIDHeader) != "" || h.Get("Nats-Scheduler") != "probe.at."+m.Subject()[len("probe.fired."):] || h.Get("Content-Type") != "application/json" {
				t.Errorf("fired %s with headers %v", m.Subject(), h)
			}
			if m.Subject() != "probe.fired.past" && time.Now().Before(at) {
				t.Errorf("%s fired before its time %s", m.Subject(), at)
			}
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := map[string]string{"probe.fired.a": "replaced", "probe.fired.b": "b", "probe.fired.past": "past"}
	if len(got) != len(want) || got["probe.fired.a"] != "replaced" || got["probe.fired.b"] != "b" || got["probe.fired.past"] != "past" {
		t.Fatalf("fired %v, want %v", got, want)
	}
	if st, err = js.Stream(ctx, "PROBE"); err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("left in the stream: %+v %v (the cancelled schedule must not remain)", info.State, err)
	}
}
