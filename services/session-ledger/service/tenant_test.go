package service_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/session-ledger/service"
)

var (
	alice = events.Principal{Tenant: "acme", User: "alice"}
	carol = events.Principal{Tenant: "acme", User: "carol"}
	bob   = events.Principal{Tenant: "globex", User: "bob"}
)

// tenantRig runs a ledger and connects users of two tenants, each with the
// permissions the server gives a tenant's user.
type tenantRig struct {
	url           string
	admin         *nats.Conn
	alice, carol  *client.Client
	bob           *client.Client
	bobNC         *nats.Conn
	bobViolations chan error
}

func newTenantRig(t *testing.T) *tenantRig {
	t.Helper()
	ns, admin := natstest.Start(t)
	url := ns.ClientURL()
	r := &tenantRig{url: url, admin: admin, bobViolations: make(chan error, 16)}
	newClient := func(nc *nats.Conn, p events.Principal) *client.Client {
		c, err := client.New(nc, client.As(p), client.WithTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// The users first: adding one reloads the server, which must not race
	// the streams the ledger creates (natstest.ConnectUser).
	r.alice = newClient(natstest.ConnectUser(t, url, alice), alice)
	r.carol = newClient(natstest.ConnectUser(t, url, carol), carol)
	// Bob's denials are what the test looks for: collect them.
	r.bobNC = natstest.ConnectUser(t, url, bob, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			r.bobViolations <- err
		}
	}))
	r.bob = newClient(r.bobNC, bob)
	lnc := natstest.ConnectAs(t, url, auth.RoleLedger)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- service.Run(ctx, lnc, service.ConfigIn(t.TempDir()), slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ledger: %v", err)
		}
	})
	return r
}

// violation waits for the server to report a permission violation on bob's
// connection naming subject.
func (r *tenantRig) violation(t *testing.T, subject string) {
	t.Helper()
	select {
	case err := <-r.bobViolations:
		if !strings.Contains(err.Error(), subject) {
			t.Fatalf("violation %v, want one naming %s", err, subject)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no permission violation for %s", subject)
	}
}

func wantCode(t *testing.T, what string, err error, code api.Code) {
	t.Helper()
	if api.CodeOf(err) != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
}

// A user of one tenant can neither read, watch, fork, merge, append to,
// archive nor export another tenant's sessions, nor read its rejections or
// list its sessions; a session of another tenant does not exist for it. A
// user of the same tenant can do all of it.
func TestTenantsAreIsolated(t *testing.T) {
	r := newTenantRig(t)
	ctx := context.Background()

	if _, err := r.alice.Start(ctx, "a1", events.SessionStarted{Task: "acme's work"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.alice.Emit(ctx, "a1", &events.ChunkAppended{Role: events.RoleUser, Content: "acme's secret"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.bob.Start(ctx, "b1", events.SessionStarted{Task: "globex's work"}); err != nil {
		t.Fatal(err)
	}
	// A refusal of alice's, recorded under acme.
	_, err := r.alice.Emit(ctx, "a1", &events.SessionResumed{Reason: "not paused"})
	wantCode(t, "alice resumes an active session", err, api.CodeTransition)
	before, err := r.alice.State(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}

	// Carol, of the same tenant, sees and works alice's session.
	if st, err := r.carol.State(ctx, "a1"); err != nil || st.Seq != before.Seq || st.Tenant != "acme" {
		t.Fatalf("carol reads a1: %+v %v", st, err)
	}
	if _, err := r.carol.Fork(ctx, api.ForkRequest{Parent: "a1", ID: "a1-fork"}); err != nil {
		t.Fatalf("carol forks a1: %v", err)
	}

	// Bob, of another tenant: every operation on a1 answers not_found.
	_, err = r.bob.State(ctx, "a1")
	wantCode(t, "bob reads a1's state", err, api.CodeNotFound)
	_, err = r.bob.Log(ctx, "a1", client.Range{From: 1})
	wantCode(t, "bob reads a1's log", err, api.CodeNotFound)
	_, err = r.bob.Verify(ctx, "a1")
	wantCode(t, "bob verifies a1", err, api.CodeNotFound)
	_, err = r.bob.Lineage(ctx, "a1")
	wantCode(t, "bob reads a1's lineage", err, api.CodeNotFound)
	_, err = r.bob.Lineage(ctx, "a1-fork")
	wantCode(t, "bob reads the lineage of a1's fork", err, api.CodeNotFound)
	_, err = r.bob.Emit(ctx, "a1", &events.ChunkAppended{Role: events.RoleUser, Content: "globex was here"})
	wantCode(t, "bob appends to a1", err, api.CodeNotFound)
	// Word for word what a session that does not exist gets.
	_, missing := r.bob.Emit(ctx, "zz", &events.ChunkAppended{Role: events.RoleUser, Content: "globex was here"})
	var le, lm *api.Error
	if !errors.As(err, &le) || !errors.As(missing, &lm) || strings.ReplaceAll(le.Message, "a1", "zz") != lm.Message {
		t.Errorf("another tenant's session is refused %q, a missing one %q: a tenant tells them apart", le, lm)
	}
	for name, do := range map[string]func(string) error{
		"state": func(id string) error { _, err := r.bob.State(ctx, id); return err },
		"fork":  func(id string) error { _, err := r.bob.Fork(ctx, api.ForkRequest{Parent: id}); return err },
		"log":   func(id string) error { _, err := r.bob.Log(ctx, id, client.Range{From: 1}); return err },
	} {
		theirs, none := do("a1"), do("zz")
		if !errors.As(theirs, &le) || !errors.As(none, &lm) || strings.ReplaceAll(le.Message, "a1", "zz") != lm.Message || le.Code != lm.Code {
			t.Errorf("%s: another tenant's session %v, a missing one %v: a tenant tells them apart", name, theirs, none)
		}
	}
	_, err = r.bob.Fork(ctx, api.ForkRequest{Parent: "a1", ID: "stolen"})
	wantCode(t, "bob forks a1", err, api.CodeNotFound)
	_, err = r.bob.Merge(ctx, api.MergeRequest{Target: "b1", Source: "a1"})
	wantCode(t, "bob merges a1 into b1", err, api.CodeNotFound)
	_, err = r.bob.Merge(ctx, api.MergeRequest{Target: "a1", Source: "b1"})
	wantCode(t, "bob merges b1 into a1", err, api.CodeNotFound)
	_, err = r.bob.Close(ctx, "a1", events.SessionClosed{Reason: "mine now"})
	wantCode(t, "bob closes a1", err, api.CodeNotFound)
	_, err = r.bob.Archive(ctx, api.ArchiveRequest{Session: "a1"})
	wantCode(t, "bob archives a1", err, api.CodeNotFound)
	_, err = r.bob.Start(ctx, "a1", events.SessionStarted{Task: "take over"})
	wantCode(t, "bob starts a session with a1's ID", err, api.CodeExists)
	if err != nil && strings.Contains(err.Error(), "head") {
		t.Errorf("the refusal tells bob about a1: %v", err)
	}
	// Fire-and-forget: refused and recorded, under globex.
	ev, _ := events.New("a1", &events.ChunkAppended{Role: events.RoleUser, Content: "via the inbox"})
	if err := r.bob.Propose(ctx, ev); err != nil {
		t.Fatal(err)
	}
	var bobs []eventstore.Rejection
	inbox := func() *eventstore.Rejection {
		for i := range bobs {
			if bobs[i].Via == "inbox" {
				return &bobs[i]
			}
		}
		return nil
	}
	for deadline := time.Now().Add(10 * time.Second); inbox() == nil; {
		if time.Now().After(deadline) {
			t.Fatalf("bob's inbox proposal was not refused: %+v", bobs)
		}
		waitForLedger(t, r.admin)
		bobs = bobs[:0]
		if err := r.bob.Rejections(ctx, "", func(rj eventstore.Rejection) error {
			bobs = append(bobs, rj)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, rj := range bobs {
		if rj.Tenant != "globex" || rj.Actor != "globex/bob" {
			t.Errorf("bob reads a rejection that is not his: %+v", rj)
		}
	}
	if got := inbox(); got.Session != "a1" || got.Code != string(api.CodeNotFound) {
		t.Errorf("bob's inbox proposal to a1: %+v, want refused as not found", got)
	}
	// Lists and rejections show each tenant its own.
	list, err := r.bob.List(ctx, api.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != "b1" || list[0].Tenant != "globex" {
		t.Errorf("bob lists %+v, want b1 only", list)
	}
	var alices []eventstore.Rejection
	if err := r.alice.Rejections(ctx, "", func(rj eventstore.Rejection) error {
		alices = append(alices, rj)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(alices) != 1 || alices[0].Actor != "acme/alice" || alices[0].Session != "a1" {
		t.Errorf("alice's rejections: %+v, want her refused resume only", alices)
	}

	// Nothing of bob's reached a1.
	after, err := r.alice.State(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if after.Seq != before.Seq || after.Hash != before.Hash || after.Status != before.Status {
		t.Fatalf("a1 changed: %d %s -> %d %s", before.Seq, before.Status, after.Seq, after.Status)
	}

	// The server itself refuses bob anything outside his names: acme's
	// live subjects, alice's requests, the stream and its API.
	if _, err := r.bobNC.Subscribe(events.TenantLiveWildcard("acme"), func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	r.violation(t, "rath.session.acme.>")
	if err := r.bobNC.Publish(alice.Ledger(events.OpState), []byte(`{"session":"a1"}`)); err != nil {
		t.Fatal(err)
	}
	r.violation(t, "rath.ledger.acme.alice.state")
	for _, subject := range []string{
		"$JS.API.STREAM.INFO." + events.StreamSessions,
		"$JS.API.DIRECT.GET." + events.StreamSessions,
		"$JS.API.CONSUMER.CREATE." + events.StreamSessions,
		events.SessionSubject("acme", "a1", "conversation"),
		"$O.rath-blobs.M.x",
	} {
		if err := r.bobNC.Publish(subject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		r.violation(t, subject)
	}
	if _, err := r.bobNC.Subscribe("_INBOX.acme.alice.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	r.violation(t, "_INBOX.acme.alice.>")
}

// waitForLedger lets the ledger decide what it has in hand: a round trip
// through it, answered once earlier inbox deliveries were taken.
func waitForLedger(t *testing.T, nc *nats.Conn) {
	t.Helper()
	c, err := client.New(nc, client.As(events.Service("admin"))) // retries while no ledger listens
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Keys(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// The ledger stamps who proposed each event, from the subject it arrived
// on: a proposed actor or tenant is discarded; approvals, lifecycle changes
// and the session's tenant name the authenticated users.
func TestActorIsStampedNotClaimed(t *testing.T) {
	r := newTenantRig(t)
	ctx := context.Background()
	start, err := events.New("s", &events.SessionStarted{Task: "stamped"})
	if err != nil {
		t.Fatal(err)
	}
	start.SetExtension(events.ExtActor, "globex/bob")
	start.SetExtension(events.ExtTenant, "globex")
	if _, err := r.alice.Append(ctx, start); err != nil {
		t.Fatal(err)
	}
	if _, err := r.alice.Emit(ctx, "s", &events.ApprovalRequested{ApprovalID: "ap1", Action: "git push"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.carol.Emit(ctx, "s", &events.ApprovalGranted{ApprovalID: "ap1", By: "the CEO"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.carol.Pause(ctx, "s", "lunch"); err != nil {
		t.Fatal(err)
	}
	st, err := r.alice.State(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if st.Tenant != "acme" {
		t.Errorf("tenant %q, want acme (the proposer's, not the claimed globex)", st.Tenant)
	}
	ap := st.Approvals["ap1"]
	if ap.RequestedBy != "acme/alice" || ap.Actor != "acme/carol" || ap.By != "the CEO" {
		t.Errorf("approval %+v: want requested by acme/alice, decided by acme/carol (claiming the CEO)", ap)
	}
	if st.StatusBy != "acme/carol" {
		t.Errorf("paused by %q, want acme/carol", st.StatusBy)
	}
	log, err := r.alice.Log(ctx, "s", client.Range{From: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"acme/alice", "acme/alice", "acme/carol", "acme/carol"}
	for i, ev := range log {
		if ev.Actor != want[i] {
			t.Errorf("event %d (%s) stamped %q, want %q", ev.Seq, ev.Type, ev.Actor, want[i])
		}
		if (ev.Tenant != "") != (i == 0) || i == 0 && ev.Tenant != "acme" {
			t.Errorf("event %d carries tenant %q", ev.Seq, ev.Tenant)
		}
	}
	// The stamps are under the chain hash and the signature.
	rep, err := r.alice.Verify(ctx, "s")
	if err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

// A service may name whom it proposes an event for (rathfor): the memory
// service appends memory events as itself for whoever asked it. The ledger
// keeps that attribute only from a service, and only if it is a valid
// actor; a tenant's user proposing it has it discarded, and the folded
// state names the principal a memory event was for.
func TestOnBehalfOnlyFromServices(t *testing.T) {
	r := newTenantRig(t)
	ctx := context.Background()
	svc, err := client.New(r.admin, client.As(events.Service("admin")), client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.alice.Start(ctx, "s", events.SessionStarted{Task: "on behalf"}); err != nil {
		t.Fatal(err)
	}
	written := func(item string) *events.MemoryWritten {
		return &events.MemoryWritten{ItemID: item, Version: 1, Content: "c", Scope: "project:x",
			Provenance: events.Provenance{Session: "s", Evidence: "human_correction"}}
	}
	steps := []struct {
		c        *client.Client
		item     string
		onBehalf events.Principal
		raw      string // a proposed rathfor that is not a principal
		wantFor  string
		wantBy   string
	}{
		{c: r.alice, item: "m1", onBehalf: carol, wantFor: "", wantBy: "acme/alice"},
		{c: svc, item: "m2", onBehalf: alice, wantFor: "acme/alice", wantBy: "acme/alice"},
		{c: svc, item: "m3", raw: "not an actor", wantFor: "", wantBy: "rath/admin"},
		{c: r.bob, item: "m4", onBehalf: alice, wantFor: "", wantBy: ""}, // refused: not bob's session
	}
	for _, s := range steps {
		opt := events.WithOnBehalf(s.onBehalf)
		if s.raw != "" {
			opt = func(e *event.Event) { e.SetExtension(events.ExtOnBehalf, s.raw) }
		}
		_, err := s.c.Emit(ctx, "s", written(s.item), opt)
		if s.c == r.bob {
			wantCode(t, "bob writes on alice's behalf", err, api.CodeNotFound)
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", s.item, err)
		}
	}
	log, err := r.alice.Log(ctx, "s", client.Range{From: 2})
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.alice.State(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 3 || len(st.Memory) != 3 {
		t.Fatalf("%d events, %d memory events: want 3", len(log), len(st.Memory))
	}
	for i, ev := range log {
		s := steps[i]
		if ev.OnBehalf != s.wantFor {
			t.Errorf("%s: rathfor %q, want %q", s.item, ev.OnBehalf, s.wantFor)
		}
		if strings.Contains(string(ev.Raw), events.ExtOnBehalf) != (s.wantFor != "") {
			t.Errorf("%s: stored body %s", s.item, ev.Raw)
		}
		if st.Memory[i].Actor != s.wantBy {
			t.Errorf("%s: state names %q, want %q", s.item, st.Memory[i].Actor, s.wantBy)
		}
	}
	rep, err := r.alice.Verify(ctx, "s")
	if err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

// An event ID is one tenant's: another tenant using the same ID neither
// learns the session that stored it (no ack, no message naming it) nor
// blocks it (JetStream's dedupe is scoped by tenant).
func TestEventIDsAreScopedByTenant(t *testing.T) {
	r := newTenantRig(t)
	ctx := context.Background()
	const secret, future = "0190a4b2-1c3d-7e4f-8a9b-0c1d2e3f4a5b", "0190a4b2-1c3d-7e4f-8a9b-0c1d2e3f4a5c"
	if _, err := r.alice.Start(ctx, "acme-secret", events.SessionStarted{Task: "acme"}, events.WithID(secret)); err != nil {
		t.Fatal(err)
	}
	named, _ := events.New("bobs-own", &events.SessionStarted{Task: "probe"}, events.WithID(secret))
	if ack, err := r.bob.Append(ctx, named); err != nil || ack.Duplicate || ack.Session != "bobs-own" {
		t.Fatalf("bob's start with alice's event ID: %+v %v; want bobs-own stored", ack, err)
	}
	probe, _ := events.New("", &events.SessionStarted{Task: "probe"}, events.WithID(secret))
	if ack, err := r.bob.Append(ctx, probe); err != nil || ack.Session != "bobs-own" {
		t.Fatalf("bob's start without an ID, with alice's event ID: %+v %v; want his own bobs-own's ack", ack, err)
	}
	// Bob stores an ID alice is about to use: hers is stored all the same.
	squat, _ := events.New("bobs-own", &events.ChunkAppended{Role: events.RoleUser, Content: "squat"}, events.WithID(future))
	if _, err := r.bob.Append(ctx, squat); err != nil {
		t.Fatal(err)
	}
	hers, _ := events.New("acme-secret", &events.ChunkAppended{Role: events.RoleUser, Content: "mine"}, events.WithID(future))
	if a, err := r.alice.Append(ctx, hers); err != nil || a.Duplicate || a.Session != "acme-secret" || a.Seq != 2 {
		t.Fatalf("alice's event with an ID bob used: %+v %v; want stored at 2", a, err)
	}
}

// A proposal published on an inbox subject whose session token is a
// wildcard (published literally) or missing is refused as malformed, under
// the proposer's tenant, and never read as a filter over other proposals.
func TestInboxSubjectWithAWildcardIsRefused(t *testing.T) {
	r := newTenantRig(t)
	ctx := context.Background()
	body := []byte(`{"specversion":"1.0","id":"w1","source":"bob","type":"rath.conversation.chunk.appended","subject":"b-none","data":{"role":"user","content":"x"}}`)
	waitForLedger(t, r.admin) // the inbox stream exists: a plain publish is stored
	for _, subject := range []string{"rath.inbox.globex.bob.*", "rath.inbox.globex.bob.>", "rath.inbox.globex.bob.x.y"} {
		if err := r.bobNC.Publish(subject, body); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.bobNC.Flush(); err != nil {
		t.Fatal(err)
	}
	want := 3
	var got []eventstore.Rejection
	for deadline := time.Now().Add(10 * time.Second); len(got) < want; {
		if time.Now().After(deadline) {
			t.Fatalf("rejections %+v, want %d malformed inbox proposals", got, want)
		}
		waitForLedger(t, r.admin)
		got = got[:0]
		if err := r.bob.Rejections(ctx, "", func(rj eventstore.Rejection) error {
			got = append(got, rj)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, rj := range got {
		if rj.Via != "inbox" || rj.Code != string(api.CodeMalformed) || rj.Actor != "globex/bob" {
			t.Errorf("rejection %+v: want a malformed inbox proposal of globex/bob", rj)
		}
	}
}

// A wildcard inbox subject is never used to look up other proposals: a
// proposal of alice's held by a ledger that died (unacked, waiting for its
// ack deadline) stays undecided when bob's wildcard proposal is refused,
// where reading "*" as a session would have decided hers out of turn.
func TestInboxWildcardDoesNotDecideOthersProposals(t *testing.T) {
	ns, admin := natstest.Start(t)
	url := ns.ClientURL()
	dir := t.TempDir()
	run := func() (stop func()) {
		lnc := natstest.ConnectAs(t, url, auth.RoleLedger)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- service.Run(ctx, lnc, service.ConfigIn(dir), slog.New(slog.NewTextHandler(io.Discard, nil)))
		}()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("ledger: %v", err)
			}
		}
	}
	ctx := context.Background()
	a, err := client.New(natstest.ConnectUser(t, url, alice), client.As(alice), client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b, err := client.New(natstest.ConnectUser(t, url, bob), client.As(bob), client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	stop := run()
	if _, err := a.Start(ctx, "a1", events.SessionStarted{Task: "acme"}); err != nil {
		t.Fatal(err)
	}
	stop()
	ev, _ := events.New("a1", &events.ChunkAppended{Role: events.RoleUser, Content: "alice's proposal"})
	if err := a.Propose(ctx, ev); err != nil {
		t.Fatal(err)
	}
	// A ledger takes alice's proposal and dies before deciding it.
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, events.StreamInbox, events.InboxConsumer)
	if err != nil {
		t.Fatal(err)
	}
	held, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range held.Messages() {
		n++
	}
	if n != 1 {
		t.Fatalf("fetched %d proposals, want alice's", n)
	}
	bobs := []byte(`{"specversion":"1.0","id":"w1","source":"bob","type":"rath.conversation.chunk.appended","subject":"b1","data":{"role":"user","content":"x"}}`)
	if err := b.Conn().Publish("rath.inbox.globex.bob.*", bobs); err != nil {
		t.Fatal(err)
	}
	defer run()()
	for deadline := time.Now().Add(10 * time.Second); ; {
		var refused bool
		if err := b.Rejections(ctx, "", func(rj eventstore.Rejection) error {
			refused = refused || rj.EventID == "w1" || strings.Contains(string(rj.Proposal), `"w1"`)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if refused {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("bob's wildcard proposal was not refused")
		}
		waitForLedger(t, admin)
	}
	st, err := a.State(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Seq != 1 {
		t.Fatalf("alice's held proposal was decided (head %d) when bob's wildcard was: out of turn", st.Seq)
	}
}

// Blobs go through the ledger, in pages: stored by content, read back whole
// by whoever has the reference (there is no listing), and bad requests are
// refused with a code naming the problem.
func TestBlobsThroughTheLedger(t *testing.T) {
	r := newTenantRig(t)
	ctx := context.Background()
	data := bytes.Repeat([]byte("rath blob "), (api.BlobPage*5/2)/10) // two and a half pages
	ref, err := r.alice.PutBlob(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	if ref != eventstore.BlobRef(data) {
		t.Fatalf("putblob answered %s, want the content's hash %s", ref, eventstore.BlobRef(data))
	}
	for name, c := range map[string]*client.Client{"alice": r.alice, "bob (who has the reference)": r.bob} {
		got, err := c.GetBlob(ctx, ref)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s reads the blob: %d bytes, %v; want %d", name, len(got), err, len(data))
		}
	}
	_, err = r.alice.GetBlob(ctx, "sha256:"+strings.Repeat("0", 64))
	wantCode(t, "a missing blob", err, api.CodeBlobNotFound)
	_, err = r.alice.GetBlob(ctx, "md5:abc")
	wantCode(t, "a malformed reference", err, api.CodeMalformed)
	ask := func(req string) error {
		t.Helper()
		// Raw bodies, as a client of another language would send them.
		reply, err := r.admin.Request(alice.Ledger(events.OpGetBlob), []byte(req), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if code := reply.Header.Get(api.HeaderError); code != "" {
			return &api.Error{Code: api.Code(code), Message: string(reply.Data)}
		}
		return nil
	}
	wantCode(t, "a negative offset", ask(`{"ref":"`+ref+`","offset":-1}`), api.CodeOutOfRange)
	wantCode(t, "an offset past the end", ask(`{"ref":"`+ref+`","offset":999999999}`), api.CodeOutOfRange)
	wantCode(t, "no body", ask(``), api.CodeMalformed)
}

// A request subject whose principal tokens are not names (only an operator
// can publish one) is answered malformed, naming the subject.
func TestRequestSubjectWithABadPrincipalIsMalformed(t *testing.T) {
	r := newTenantRig(t)
	waitForLedger(t, r.admin)
	for _, subject := range []string{"rath.ledger.Acme.alice.state", "rath.ledger.acme.al_ice!.state"} {
		reply, err := r.admin.Request(subject, []byte(`{"session":"a1"}`), 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", subject, err)
		}
		if code := reply.Header.Get(api.HeaderError); code != string(api.CodeMalformed) || !strings.Contains(string(reply.Data), "invalid") {
			t.Errorf("%s: %s %s; want malformed naming the invalid name", subject, code, reply.Data)
		}
	}
}
