package ledger_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/session-ledger/internal/ledger"
)

var (
	acmeUser   = events.Principal{Tenant: "acme", User: "alice"}
	globexUser = events.Principal{Tenant: "globex", User: "bob"}
)

// tenantsRig is a ledger configured by edit, with a client of a user of
// acme and one of globex besides the rig's own (a service, never bound).
func tenantsRig(t *testing.T, edit func(*ledger.Config)) (r *rig, acme, globex *client.Client, nc *nats.Conn) {
	t.Helper()
	ns, nc := natstest.Start(t)
	// Users first: adding one reloads the server (natstest.ConnectUser).
	users := make([]*client.Client, 2)
	for i, p := range []events.Principal{acmeUser, globexUser} {
		c, err := client.New(natstest.ConnectUser(t, ns.ClientURL(), p), client.As(p), client.WithRetryFor(0))
		if err != nil {
			t.Fatal(err)
		}
		users[i] = c
	}
	return serveWith(t, nc, "ledger-a", edit), users[0], users[1], nc
}

// serviceClient is a client of one of Rath's services (the connection is
// the admin's, which may publish as anyone).
func serviceClient(t *testing.T, nc *nats.Conn) *client.Client {
	t.Helper()
	c, err := client.New(nc, client.As(events.Service("tool-runner")), client.WithRetryFor(0))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// wantQuota checks a refusal is quota_exceeded and says what it must.
func wantQuota(t *testing.T, what string, err error, says ...string) {
	t.Helper()
	if !errors.Is(err, api.ErrQuotaExceeded) {
		t.Fatalf("%s: %v, want quota_exceeded", what, err)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("%s: %q does not say %q", what, err, s)
		}
	}
}

// A tenant starts at most its quota of sessions a minute, however it asks
// (a start, a batch, the inbox, a fork); a refused start stores nothing and
// is recorded where the tenant's other refusals are; other tenants and the
// services start on; the quota fills again with time.
func TestStartsPerMinuteQuota(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC).UnixNano())
	_, acme, globex, nc := tenantsRig(t, func(c *ledger.Config) {
		c.Quotas = ledger.Quotas{StartsPerMinute: 3}
		ledger.SetClock(c, func() time.Time { return time.Unix(0, now.Load()).UTC() })
	})
	ctx := context.Background()
	for _, id := range []string{"s1", "s2", "s3"} {
		if _, err := acme.Start(ctx, id, events.SessionStarted{Task: id}); err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
	}
	_, err := acme.Start(ctx, "s4", events.SessionStarted{Task: "one too many"})
	wantQuota(t, "a fourth start in the minute", err, "tenant acme started 3 sessions in the last minute", "session s4 not started", "quota starts-per-minute: 3", "--quota-starts-per-minute", "ask again in 20s")
	if _, err := acme.State(ctx, "s4"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("state of the refused start: %v, want session_not_found", err)
	}
	var recorded []eventstore.Rejection
	if err := acme.Rejections(ctx, "s4", func(rj eventstore.Rejection) error { recorded = append(recorded, rj); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(recorded) != 1 || recorded[0].Code != string(api.CodeQuotaExceeded) || recorded[0].Actor != acmeUser.String() {
		t.Fatalf("rejections of s4: %+v, want one quota_exceeded by %s", recorded, acmeUser)
	}

	// A batch: the start is refused, an append to a session acme has is not.
	start, err := events.New("s5", &events.SessionStarted{Task: "batched"})
	if err != nil {
		t.Fatal(err)
	}
	more, err := events.New("s1", chunk("more"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := acme.AppendBatch(ctx, []event.Event{start, more})
	if err != nil {
		t.Fatal(err)
	}
	wantQuota(t, "a start in a batch", res[0].Err, "session s5 not started")
	if res[1].Err != nil || res[1].Ack.Seq != 2 {
		t.Fatalf("the batch's append to s1: %+v", res[1])
	}
	// A fork is a new session too.
	_, err = acme.Fork(ctx, api.ForkRequest{Parent: "s1", ID: "f1"})
	wantQuota(t, "a fork", err, "session f1 not started")
	// The inbox: refused and recorded, like a request.
	inboxed, err := events.New("s6", &events.SessionStarted{Task: "by the inbox"})
	if err != nil {
		t.Fatal(err)
	}
	if err := acme.Propose(ctx, inboxed); err != nil {
		t.Fatal(err)
	}
	testrig.Eventually(t, 30*time.Second, "the inbox start's rejection", func() (bool, string) {
		var codes []string
		err := acme.Rejections(ctx, "s6", func(rj eventstore.Rejection) error { codes = append(codes, rj.Code); return nil })
		return err == nil && len(codes) == 1 && codes[0] == string(api.CodeQuotaExceeded), strings.Join(codes, ",")
	})
	for _, id := range []string{"s5", "f1", "s6"} {
		if _, err := acme.State(ctx, id); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("state of refused %s: %v, want session_not_found", id, err)
		}
	}

	// Another tenant and a service start on.
	if _, err := globex.Start(ctx, "g1", events.SessionStarted{Task: "globex"}); err != nil {
		t.Fatalf("globex's start while acme is at its quota: %v", err)
	}
	svc := serviceClient(t, nc)
	for _, id := range []string{"svc1", "svc2", "svc3", "svc4"} {
		if _, err := svc.Start(ctx, id, events.SessionStarted{Task: "a service's"}); err != nil {
			t.Fatalf("a service's start: %v", err)
		}
	}

	// Twenty seconds later a third of the quota is back: one start.
	now.Add(int64(20 * time.Second))
	if _, err := acme.Start(ctx, "s7", events.SessionStarted{Task: "later"}); err != nil {
		t.Fatalf("a start 20s later: %v", err)
	}
	_, err = acme.Start(ctx, "s8", events.SessionStarted{Task: "too soon"})
	wantQuota(t, "a second start 20s later", err, "session s8 not started")
	// What was accepted is whole.
	for _, id := range []string{"s1", "s7", "g1", "svc4"} {
		rep, err := svc.Verify(ctx, id)
		if err != nil || !rep.OK {
			t.Fatalf("verify %s: %+v, %v", id, rep, err)
		}
	}
}

// A start the ledger refuses for what it holds (too large to store) spends
// none of the tenant's starts: the quota counts sessions started, and a
// start is counted only once it is sealed and fits, on the single path and
// in a batch.
func TestRefusedStartSpendsNoStart(t *testing.T) {
	_, acme, _, _ := tenantsRig(t, func(c *ledger.Config) {
		c.Quotas = ledger.Quotas{StartsPerMinute: 1}
	})
	ctx := context.Background()
	huge := events.SessionStarted{Task: strings.Repeat("x", 1<<20)}
	_, err := acme.Start(ctx, "big", huge)
	wantCode(t, err, api.CodeTooLarge)
	big, err := events.New("big2", &huge)
	if err != nil {
		t.Fatal(err)
	}
	res, err := acme.AppendBatch(ctx, []event.Event{big})
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, res[0].Err, api.CodeTooLarge)
	if _, err := acme.Start(ctx, "s1", events.SessionStarted{Task: "the one start of the minute"}); err != nil {
		t.Fatalf("a start after refused ones: %v", err)
	}
	_, err = acme.Start(ctx, "s2", events.SessionStarted{Task: "one too many"})
	wantQuota(t, "a second start in the minute", err, "session s2 not started")
}

// A tenant stores at most its quota of blob bytes: content stored already,
// by anyone, adds nothing; new content past the quota is refused and not
// stored; other tenants and the services store on; a restarted ledger
// remembers what the tenant stored.
func TestBlobBytesQuota(t *testing.T) {
	edit := func(c *ledger.Config) { c.Quotas = ledger.Quotas{BlobBytes: 1000} }
	r, acme, globex, nc := tenantsRig(t, edit)
	ctx := context.Background()
	a, b := bytes.Repeat([]byte("a"), 600), bytes.Repeat([]byte("b"), 600)
	refA, err := acme.PutBlob(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := acme.PutBlob(ctx, a); err != nil || again != refA {
		t.Fatalf("the same blob again: %s, %v", again, err)
	}
	_, err = acme.PutBlob(ctx, b)
	wantQuota(t, "600 new bytes past 600 stored", err, "tenant acme has stored 600 bytes of blobs", "quota blob-bytes: 1000", "--quota-blob-bytes")
	if _, err := acme.GetBlob(ctx, eventstore.BlobRef(b)); !errors.Is(err, api.ErrBlobNotFound) {
		t.Fatalf("the refused blob: %v, want blob_not_found", err)
	}
	if _, err := globex.PutBlob(ctx, b); err != nil {
		t.Fatalf("globex stores while acme is at its quota: %v", err)
	}
	if _, err := acme.PutBlob(ctx, b); err != nil {
		t.Fatalf("content globex stored already: %v", err)
	}
	if _, err := serviceClient(t, nc).PutBlob(ctx, bytes.Repeat([]byte("s"), 4000)); err != nil {
		t.Fatalf("a service's blob: %v", err)
	}

	r.stop()
	serveWith(t, nc, "ledger-b", edit)
	_, err = acme.PutBlob(ctx, bytes.Repeat([]byte("d"), 500))
	wantQuota(t, "500 new bytes after a restart", err, "has stored 600 bytes")
	if _, err := acme.PutBlob(ctx, bytes.Repeat([]byte("e"), 400)); err != nil {
		t.Fatalf("400 bytes, up to the quota: %v", err)
	}
	if got, err := acme.GetBlob(ctx, refA); err != nil || !bytes.Equal(got, a) {
		t.Fatalf("acme's first blob: %d bytes, %v", len(got), err)
	}
}

// A tenant has at most its quota of pulls in flight at one ledger; other
// tenants and services are not counted with it, and a pull that ends gives
// its place back.
func TestPullsInFlightQuota(t *testing.T) {
	_, nc := natstest.Start(t)
	r := serveWith(t, nc, "ledger-a", func(c *ledger.Config) { c.Quotas = ledger.Quotas{Pulls: 2} })
	first, err := r.l.EnterPull(acmeUser)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.l.EnterPull(acmeUser); err != nil {
		t.Fatal(err)
	}
	_, err = r.l.EnterPull(events.Principal{Tenant: "acme", User: "carol"})
	wantQuota(t, "a third pull of acme's", err, "tenant acme has 2 pulls in flight", "quota pulls: 2", "--quota-pulls")
	if _, err := r.l.EnterPull(globexUser); err != nil {
		t.Fatalf("globex's pull: %v", err)
	}
	for range 5 {
		if _, err := r.l.EnterPull(events.Service("tool-runner")); err != nil {
			t.Fatalf("a service's pull: %v", err)
		}
	}
	first()
	if _, err := r.l.EnterPull(acmeUser); err != nil {
		t.Fatalf("a pull after one ended: %v", err)
	}
}
