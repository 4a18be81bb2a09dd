package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
)

// A ledger that died holding a session's first proposals unacked must not
// let a live ledger decide the later ones first.
func TestInboxOrderSurvivesAProposalHeldByADeadLedger(t *testing.T) {
	_, nc := natstest.Start(t)
	ctx := context.Background()
	if _, err := eventstore.Open(ctx, nc, eventstore.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	dead, err := js.CreateOrUpdateConsumer(ctx, events.StreamInbox, jetstream.ConsumerConfig{
		Durable: events.InboxConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxAckPending: 4096,
	})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := client.New(nc)
	var ids []string
	start, _ := events.New("ord", &events.SessionStarted{Task: "order"})
	ids = append(ids, start.ID())
	if err := c.Propose(ctx, start); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		ev, _ := events.New("ord", chunk("n"))
		ids = append(ids, ev.ID())
		if err := c.Propose(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	// The dying ledger takes the first two and never acks them.
	batch, err := dead.Fetch(2)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range batch.Messages() {
		n++
	}
	if n != 2 {
		t.Fatalf("dead ledger fetched %d", n)
	}

	r := serveOn(t, nc, "live")
	var got []string
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := r.c.Watch(wctx, "ord", func(ev events.Stored) error {
		got = append(got, ev.ID)
		if len(got) == len(ids) {
			return errDone
		}
		return nil
	}); err != errDone {
		t.Fatalf("watch: %v (got %d of %d)", err, len(got), len(ids))
	}
	for i := range ids {
		if got[i] != ids[i] {
			t.Fatalf("event %d is %s, want %s: order broken", i, got[i], ids[i])
		}
	}
	if rej := r.rejections(t, "ord"); len(rej) != 0 {
		t.Fatalf("rejections: %+v", rej)
	}
}

func TestInboxSubjectMustNameTheSession(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.start(t, "mine")
	ev, _ := events.New("mine", chunk("misfiled"))
	msg := []byte(mustMarshal(t, ev))
	js := r.store.JetStream()
	if _, err := js.Publish(ctx, events.DefaultClient.Inbox("theirs"), msg); err != nil {
		t.Fatal(err)
	}
	chunkOnNew, _ := events.New("mine", chunk("not a start"))
	if _, err := js.Publish(ctx, events.DefaultClient.Inbox(""), []byte(mustMarshal(t, chunkOnNew))); err != nil {
		t.Fatal(err)
	}
	// A start without a subject on rath.inbox.<id> takes that ID.
	start, _ := events.New("", &events.SessionStarted{Task: "named by the inbox"})
	if _, err := js.Publish(ctx, events.DefaultClient.Inbox("from-inbox"), []byte(mustMarshal(t, start))); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := r.c.Watch(wctx, "from-inbox", func(events.Stored) error { return errDone }); err != errDone {
		t.Fatal(err)
	}
	for {
		rej := r.rejections(t, "")
		if len(rej) == 2 {
			for _, rj := range rej {
				if rj.Code != string(api.CodeMalformed) || rj.Via != "inbox" {
					t.Fatalf("rejection %+v", rj)
				}
			}
			break
		}
		if wctx.Err() != nil {
			t.Fatalf("rejections: %+v", rej)
		}
		waitABit(r)
	}
	st, _ := r.c.State(ctx, "mine")
	if st.Seq != 1 {
		t.Fatalf("misfiled proposals were appended: head %d", st.Seq)
	}
}

func mustMarshal(t *testing.T, ev any) string {
	t.Helper()
	b, err := jsonMarshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
