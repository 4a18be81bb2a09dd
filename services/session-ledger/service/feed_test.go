package service_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// pullOne pulls a feed once and returns its event (nil: none for now).
func pullOne(t *testing.T, c *client.Client, req api.PullRequest) *api.Pulled {
	t.Helper()
	r, err := c.Pull(context.Background(), req)
	if err != nil {
		t.Fatalf("pull %+v: %v", req, err)
	}
	if len(r.Events) == 0 {
		return nil
	}
	return &r.Events[0]
}

// A tenant's user reads a durable feed of its own tenant's events through
// the ledger, one at a time: an event comes back after a nack, settled
// events do not, a second user of the tenant shares the feed's position,
// and another tenant neither sees the events nor settles their tokens.
func TestFeedDeliversATenantsEventsOnceAcked(t *testing.T) {
	r := newTenantRig(t)
	ctx := context.Background()
	if _, err := r.alice.Start(ctx, "feed-a", events.SessionStarted{Task: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.bob.Start(ctx, "feed-b", events.SessionStarted{Task: "b"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.alice.Emit(ctx, "feed-a", &events.WorkDone{WorkID: "w1"}); err != nil {
		t.Fatal(err)
	}
	feed := api.PullRequest{Consumer: "workers"}

	first := pullOne(t, r.alice, feed)
	if first == nil {
		t.Fatal("no event in acme's feed")
	}
	ev, err := events.ParseStored(first.Event)
	if err != nil || ev.Session != "feed-a" || ev.Seq != 1 || first.Delivered != 1 {
		t.Fatalf("first event: %+v delivered %d, %v", ev, first.Delivered, err)
	}
	// One event outstanding: nothing more until it is settled.
	if p := pullOne(t, r.carol, feed); p != nil {
		t.Fatalf("a second event while the first is outstanding: %s", p.Event)
	}
	// Bob's tenant cannot settle acme's token, and has a feed of its own
	// under the same name.
	err = r.bob.Settle(ctx, api.SettleRequest{Consumer: "workers", Token: first.Token})
	if !errors.Is(err, api.ErrMalformed) {
		t.Fatalf("bob settled alice's token: %v", err)
	}
	if p := pullOne(t, r.bob, feed); p == nil {
		t.Fatal("no event in globex's feed")
	} else if ev, _ := events.ParseStored(p.Event); ev.Session != "feed-b" {
		t.Fatalf("globex's feed delivered %s", ev.Session)
	}

	// A nack gives it back at once.
	if err := r.alice.Settle(ctx, api.SettleRequest{Consumer: "workers", Token: first.Token, Nack: true}); err != nil {
		t.Fatal(err)
	}
	again := pullOne(t, r.carol, feed)
	if again == nil || again.Delivered != 2 {
		t.Fatalf("after a nack: %+v", again)
	}
	if ev, _ := events.ParseStored(again.Event); ev.Seq != 1 {
		t.Fatalf("after a nack the feed delivered seq %d, want 1 again", ev.Seq)
	}
	// The first delivery's token is stale now: it neither settles the event
	// its new holder works on nor moves the feed under it.
	for _, stale := range []api.SettleRequest{
		{Consumer: "workers", Token: first.Token},
		{Consumer: "workers", Token: first.Token, Nack: true},
		{Consumer: "workers", Token: first.Token, Progress: true},
	} {
		if err := r.alice.Settle(ctx, stale); !errors.Is(err, api.ErrStale) || !strings.Contains(err.Error(), "delivered since") {
			t.Fatalf("settle %+v with the first delivery's token: %v, want stale", stale, err)
		}
	}
	if p := pullOne(t, r.alice, feed); p != nil {
		t.Fatalf("the feed moved on while its event is out: %s", p.Event)
	}
	// Progress keeps it; an ack settles it; a second ack changes nothing.
	if err := r.carol.Settle(ctx, api.SettleRequest{Consumer: "workers", Token: again.Token, Progress: true}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := r.carol.Settle(ctx, api.SettleRequest{Consumer: "workers", Token: again.Token}); err != nil {
			t.Fatal(err)
		}
	}
	next := pullOne(t, r.alice, feed)
	if next == nil {
		t.Fatal("the second event was not delivered")
	}
	if ev, _ := events.ParseStored(next.Event); ev.Session != "feed-a" || ev.Seq != 2 || ev.Type != events.TypeWorkDone {
		t.Fatalf("second event: %+v", ev)
	}
	if err := r.alice.Settle(ctx, api.SettleRequest{Consumer: "workers", Token: next.Token}); err != nil {
		t.Fatal(err)
	}
	if p := pullOne(t, r.alice, feed); p != nil {
		t.Fatalf("an event after all were settled: %s", p.Event)
	}

	// A feed of one session reads that session only, and a session of
	// another tenant is not one a feed can read.
	if p := pullOne(t, r.alice, api.PullRequest{Consumer: "one", Session: "feed-a"}); p == nil {
		t.Fatal("no event in the session's feed")
	}
	if r, err := r.alice.Pull(ctx, api.PullRequest{Consumer: "theirs", Session: "feed-b"}); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("acme pulled a feed of globex's session: %+v, %v; want session_not_found", r, err)
	}
	// An operator removes a feed: the next pull starts it anew, at the first
	// event.
	js, err := jetstream.New(r.admin)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, events.StreamSessions)
	if err != nil {
		t.Fatal(err)
	}
	var removed int
	lister := stream.ListConsumers(ctx)
	for info := range lister.Info() {
		if strings.Contains(info.Config.Description, `"workers" of acme`) {
			if err := stream.DeleteConsumer(ctx, info.Name); err != nil {
				t.Fatal(err)
			}
			removed++
		}
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	if removed != 1 {
		t.Fatalf("removed %d consumers of acme's feed workers", removed)
	}
	p := pullOne(t, r.alice, feed)
	if p == nil {
		t.Fatal("no event after the feed was removed")
	} else if ev, _ := events.ParseStored(p.Event); ev.Seq != 1 || p.Delivered != 1 {
		t.Fatalf("after the feed was removed: seq %d delivered %d, want the first event anew", ev.Seq, p.Delivered)
	}
	// A settle that cannot mean one thing is refused, naming why.
	for want, bad := range map[string]api.SettleRequest{
		"choose one": {Consumer: "workers", Token: p.Token, Nack: true, Progress: true},
		"negative":   {Consumer: "workers", Token: p.Token, Nack: true, DelayMS: -1},
	} {
		if err := r.alice.Settle(ctx, bad); !errors.Is(err, api.ErrMalformed) || !strings.Contains(err.Error(), want) {
			t.Errorf("settle %+v: %v, want malformed naming %q", bad, err, want)
		}
	}
	if _, err := r.alice.Pull(ctx, api.PullRequest{Consumer: "a.b"}); !errors.Is(err, api.ErrMalformed) {
		t.Fatalf("a feed named a.b: %v", err)
	}
	for _, max := range []int{-1, 2} {
		if _, err := r.alice.Pull(ctx, api.PullRequest{Consumer: "workers", Max: max}); !errors.Is(err, api.ErrMalformed) || !strings.Contains(err.Error(), "at most 1") {
			t.Errorf("a pull of max %d: %v, want malformed", max, err)
		}
	}
	// A token settled without the session its feed was pulled with names
	// another feed, and the refusal says so.
	one := pullOne(t, r.alice, api.PullRequest{Consumer: "solo", Session: "feed-a"})
	if one == nil {
		t.Fatal("no event in the session's feed")
	}
	if err := r.alice.Settle(ctx, api.SettleRequest{Consumer: "solo", Token: one.Token}); !errors.Is(err, api.ErrMalformed) || !strings.Contains(err.Error(), "without a session") {
		t.Errorf("a settle without its feed's session: %v", err)
	}
}
