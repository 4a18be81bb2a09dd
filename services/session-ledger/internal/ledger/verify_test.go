package ledger_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/embedded"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/session"
)

// rewrite replaces a session's stored events straight in the stream, behind
// the ledger's back: it purges the session's subjects and republishes the
// bodies edit returns, in order.
func rewrite(t *testing.T, r *rig, id string, edit func([]eventstore.Msg) []eventstore.Msg) {
	t.Helper()
	ctx := context.Background()
	var msgs []eventstore.Msg
	if err := r.store.ScanSession(ctx, id, 0, 0, func(m eventstore.Msg) error {
		msgs = append(msgs, m)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	js := r.store.JetStream()
	stream, err := js.Stream(ctx, events.StreamSessions)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(events.SessionFilter(id))); err != nil {
		t.Fatal(err)
	}
	for _, m := range edit(msgs) {
		if _, err := js.Publish(ctx, m.Subject, m.Body); err != nil {
			t.Fatal(err)
		}
	}
}

func TestVerifyDetectsTampering(t *testing.T) {
	cases := []struct {
		name    string
		edit    func([]eventstore.Msg) []eventstore.Msg
		seq     uint64
		because string
	}{
		{"altered", func(ms []eventstore.Msg) []eventstore.Msg {
			ms[2].Body = bytes.Replace(ms[2].Body, []byte("step 3"), []byte("step X"), 1)
			return ms
		}, 3, "hash mismatch"},
		{"removed", func(ms []eventstore.Msg) []eventstore.Msg {
			return append(ms[:3:3], ms[4:]...)
		}, 4, "missing sequence 4"},
		{"inserted", func(ms []eventstore.Msg) []eventstore.Msg {
			forged := ms[4]
			out := append([]eventstore.Msg{}, ms[:5]...)
			out = append(out, forged)
			return append(out, ms[5:]...)
		}, 5, "inserted or reordered"},
		{"reordered", func(ms []eventstore.Msg) []eventstore.Msg {
			ms[5], ms[6] = ms[6], ms[5]
			return ms
		}, 6, "missing sequence 6"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.start(t, "s")
			for i := 2; i <= 8; i++ {
				r.emit(t, "s", chunk("step "+string(rune('0'+i))))
			}
			r.verifyOK(t, "s")
			rewrite(t, r, "s", tc.edit)
			rep, err := r.c.Verify(context.Background(), "s")
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK || rep.Fault == nil || rep.Fault.Seq != tc.seq || !strings.Contains(rep.Fault.Reason, tc.because) {
				t.Fatalf("verify after %s: %+v", tc.name, rep.Fault)
			}
		})
	}
}

func TestVerifyFollowsForkAncestry(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.start(t, "p")
	for i := 0; i < 5; i++ {
		r.emit(t, "p", chunk("step "+string(rune('a'+i))))
	}
	if _, err := r.c.Fork(ctx, forkAt("p", 4, "c")); err != nil {
		t.Fatal(err)
	}
	r.emit(t, "c", chunk("child"))
	r.verifyOK(t, "c")
	// Tampering with the parent's shared prefix breaks the child too...
	rewrite(t, r, "p", func(ms []eventstore.Msg) []eventstore.Msg {
		ms[1].Body = bytes.Replace(ms[1].Body, []byte("step a"), []byte("step Z"), 1)
		return ms
	})
	rep, _ := r.c.Verify(ctx, "c")
	if rep.OK || rep.Fault.Session != "p" || rep.Fault.Seq != 2 {
		t.Fatalf("child verify after parent tampering: %+v", rep.Fault)
	}
}

// A reply above the server's message limit is an error naming the limit, not
// silence until the client times out.
func TestTooLargeReplyIsAnError(t *testing.T) {
	ns, err := embedded.Start(embedded.Config{Listen: "127.0.0.1:0", StoreDir: t.TempDir(), MaxPayload: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	r := serveOn(t, natstest.Connect(t, ns.ClientURL()), "small")
	r.start(t, "big")
	for i := 0; i < 20; i++ {
		r.emit(t, "big", chunk(strings.Repeat("x", 4000)))
	}
	// The state overview is bounded, but its largest options are not meant
	// for a 64 KiB server.
	_, err = r.c.Overview(context.Background(), api.StateRequest{Session: "big", Tail: session.MaxTail, Clip: session.MaxClip})
	wantCode(t, err, api.CodeTooLarge)
	if !strings.Contains(err.Error(), "message limit") {
		t.Fatalf("error %v does not name the limit", err)
	}
	// Its defaults fit, and the whole state folds from the log.
	if _, err := r.c.Overview(context.Background(), api.StateRequest{Session: "big"}); err != nil {
		t.Fatalf("default overview on a 64 KiB server: %v", err)
	}
	if st, err := r.c.State(context.Background(), "big"); err != nil || len(st.Chunks) != 20 {
		t.Fatalf("state folded from the log: %v", err)
	}
	// The log still pages it out.
	if log, err := r.c.Log(context.Background(), "big", client.Range{From: 1, To: 5}); err != nil || len(log) != 5 {
		t.Fatalf("log: %d %v", len(log), err)
	}
}

// Log pages are bounded in bytes too; the client asks for more pages.
func TestLogPagesFitTheMessageLimit(t *testing.T) {
	ns, err := embedded.Start(embedded.Config{Listen: "127.0.0.1:0", StoreDir: t.TempDir(), MaxPayload: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	r := serveOn(t, natstest.Connect(t, ns.ClientURL()), "small")
	r.start(t, "pages")
	for i := 0; i < 40; i++ {
		r.emit(t, "pages", chunk(strings.Repeat("y", 3000)))
	}
	log, err := r.c.Log(context.Background(), "pages", client.Range{From: 1})
	if err != nil || len(log) != 41 || log[40].Seq != 41 {
		t.Fatalf("log: %d events, %v", len(log), err)
	}
}
