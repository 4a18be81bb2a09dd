package service_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/memoryapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/memory-svc/service"
)

var (
	alice = events.Principal{Tenant: "acme", User: "alice"}
	bob   = events.Principal{Tenant: "globex", User: "bob"}
)

// tenantRig runs a ledger and a memory service that the test can restart,
// and connects two tenants' users, each with the permissions the server
// gives a tenant's user, and the agent worker.
type tenantRig struct {
	url        string
	alice, bob *client.Client
	worker     *client.Client // rath/agent-worker
	stopMemory func()
}

func newTenantRig(t *testing.T) *tenantRig {
	t.Helper()
	ns, _ := natstest.Start(t)
	url := ns.ClientURL()
	// The users first: adding one reloads the server, which must not race
	// the streams the services create (natstest.ConnectUser).
	anc, bnc := natstest.ConnectUser(t, url, alice), natstest.ConnectUser(t, url, bob)
	testrig.Ledger(t, url)
	r := &tenantRig{url: url}
	r.startMemory(t)
	newClient := func(nc *nats.Conn, p events.Principal) *client.Client {
		c, err := client.New(nc, client.As(p), client.WithTimeout(10*time.Second), client.WithRetryFor(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	r.alice = newClient(anc, alice)
	r.bob = newClient(bnc, bob)
	r.worker = newClient(natstest.ConnectAs(t, url, auth.RoleAgentWorker), auth.RoleAgentWorker.Principal())
	return r
}

// startMemory starts a memory service process on its own connection; it
// rebuilds its view from the streams.
func (r *tenantRig) startMemory(t *testing.T) {
	t.Helper()
	mnc := natstest.ConnectAs(t, r.url, auth.RoleMemory)
	// Stopped before its connection closes (cleanups run last first).
	m := testrig.Run(t, "memory service", func(ctx context.Context) error { return service.Run(ctx, mnc, service.DefaultConfig(), quiet) })
	r.stopMemory = func() {
		if err := m.Stop(); err != nil {
			t.Errorf("memory service: %v", err)
		}
	}
}

// restartMemory stops the memory service and starts a new one.
func (r *tenantRig) restartMemory(t *testing.T) {
	t.Helper()
	r.stopMemory()
	r.startMemory(t)
}

// refused checks that err has code and reads exactly like other, the
// refusal of something that does not exist (with its ID in place of id).
func refused(t *testing.T, what string, err error, code api.Code, other error, id, otherID string) {
	t.Helper()
	if api.CodeOf(err) != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
	if other == nil || strings.ReplaceAll(err.Error(), id, "X") != strings.ReplaceAll(other.Error(), otherID, "X") {
		t.Errorf("%s: %q does not read like the refusal of what does not exist, %q", what, err, other)
	}
}

func hitIDs(hs []memoryapi.Hit) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.ItemID
	}
	return out
}

// A user of one tenant can neither recall, search, read nor change another
// tenant's memory items, nor name another tenant's session in a request:
// both do not exist for it, and read exactly as what does not exist. A
// service recalling for a session gets that session's tenant's items only,
// even when another tenant's match better. The scoping holds after the
// memory service rebuilds its view from the stream.
func TestTenantsMemoryIsIsolated(t *testing.T) {
	r := newTenantRig(t)
	ctx := context.Background()
	am, bm := r.alice.Memory(), r.bob.Memory()

	if _, err := r.alice.Start(ctx, "a1", events.SessionStarted{Task: "acme's work"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.bob.Start(ctx, "b1", events.SessionStarted{Task: "globex's work"}); err != nil {
		t.Fatal(err)
	}
	secret := "the staging deploy key rotates every friday at noon"
	add := func(m *client.Memory, session, content string) memoryapi.Record {
		t.Helper()
		rep, err := m.Add(ctx, memoryapi.AddRequest{Session: session, Content: content, Scope: "project:shared",
			Tags: []string{"ops"}, Evidence: memoryapi.EvidenceHumanCorrection})
		if err != nil {
			t.Fatalf("add %q: %v", content, err)
		}
		return rep.Record
	}
	a1 := add(am, "a1", secret)
	a2 := add(am, "a1", "deploy keys live in the vault")
	// Globex's items match alice's words better than her own do.
	b1 := add(bm, "b1", secret+"; "+secret)
	b2 := add(bm, "b1", "deploy notes")
	acme, globex := []string{a1.ItemID, a2.ItemID}, []string{b1.ItemID, b2.ItemID}
	if a1.Tenant != "acme" || a1.Actor != "acme/alice" || b1.Tenant != "globex" || b1.Actor != "globex/bob" {
		t.Fatalf("records name tenant %q actor %q, and %q %q", a1.Tenant, a1.Actor, b1.Tenant, b1.Actor)
	}

	// What does not exist, to compare the refusals with.
	_, noItem := bm.Show(ctx, "mem-nothing")
	_, noSession := bm.Add(ctx, memoryapi.AddRequest{Session: "nothing", Content: "x", Scope: "project:shared", Evidence: memoryapi.EvidenceHumanCorrection})

	only := func(what string, hs []memoryapi.Hit, want, never []string) {
		t.Helper()
		got := hitIDs(hs)
		for _, id := range never {
			if slices.Contains(got, id) {
				t.Errorf("%s returns another tenant's item %s: %v", what, id, got)
			}
		}
		for _, id := range want {
			if !slices.Contains(got, id) {
				t.Errorf("%s misses %s: %v", what, id, got)
			}
		}
	}
	check := func(phase string) {
		t.Helper()
		// Bob: alice's exact words, every k, search and recall.
		for _, k := range []int{1, 2, memoryapi.MaxK} {
			res, err := bm.Search(ctx, memoryapi.SearchRequest{Query: secret, K: k})
			if err != nil {
				t.Fatal(err)
			}
			only(phase+": bob's search", res.Hits, globex[:min(k, 2)], acme)
			rec, err := bm.Recall(ctx, memoryapi.RecallRequest{Session: "b1", Query: secret, K: k})
			if err != nil {
				t.Fatal(err)
			}
			only(phase+": bob's recall", rec.Hits, globex[:min(k, 2)], acme)
		}
		// Alice sees hers, not bob's, even though his match better.
		res, err := am.Search(ctx, memoryapi.SearchRequest{Query: secret, K: 1})
		if err != nil {
			t.Fatal(err)
		}
		only(phase+": alice's search", res.Hits, acme[:1], globex)

		// Bob on alice's item: it does not exist.
		_, err = bm.Show(ctx, a1.ItemID)
		refused(t, phase+": bob shows alice's item", err, memoryapi.CodeItemNotFound, noItem, a1.ItemID, "mem-nothing")
		_, err = bm.History(ctx, a1.ItemID)
		wantCodeOf(t, phase+": bob's history of alice's item", err, memoryapi.CodeItemNotFound)
		_, err = bm.Readers(ctx, a1.ItemID)
		wantCodeOf(t, phase+": bob's readers of alice's item", err, memoryapi.CodeItemNotFound)
		_, err = bm.Justify(ctx, memoryapi.JustifyRequest{ItemID: a1.ItemID})
		wantCodeOf(t, phase+": bob justifies alice's item", err, memoryapi.CodeItemNotFound)
		_, err = bm.Retract(ctx, memoryapi.RetractRequest{ItemID: a1.ItemID, Session: "b1", By: "bob", Reason: "mine"})
		wantCodeOf(t, phase+": bob retracts alice's item", err, memoryapi.CodeItemNotFound)
		_, err = bm.Restore(ctx, memoryapi.RestoreRequest{ItemID: a1.ItemID, Version: 1, Session: "b1", By: "bob", Reason: "mine"})
		wantCodeOf(t, phase+": bob restores alice's item", err, memoryapi.CodeItemNotFound)
		_, err = bm.Add(ctx, memoryapi.AddRequest{ItemID: a1.ItemID, Session: "b1", Content: "globex was here", Scope: "project:shared", Evidence: memoryapi.EvidenceHumanCorrection})
		wantCodeOf(t, phase+": bob writes a version of alice's item", err, memoryapi.CodeItemExists)

		// Bob naming alice's session: it does not exist.
		_, err = bm.Add(ctx, memoryapi.AddRequest{Session: "a1", Content: "x", Scope: "project:shared", Evidence: memoryapi.EvidenceHumanCorrection})
		refused(t, phase+": bob adds in alice's session", err, memoryapi.CodeSessionNotFound, noSession, "a1", "nothing")
		_, err = bm.Recall(ctx, memoryapi.RecallRequest{Session: "a1", Query: secret})
		wantCodeOf(t, phase+": bob recalls in alice's session", err, memoryapi.CodeSessionNotFound)
		_, err = bm.Present(ctx, memoryapi.PresentRequest{Session: "a1"})
		wantCodeOf(t, phase+": bob asks what alice's session held", err, memoryapi.CodeSessionNotFound)
		_, err = bm.Retract(ctx, memoryapi.RetractRequest{ItemID: b1.ItemID, Session: "a1", By: "bob", Reason: "x"})
		wantCodeOf(t, phase+": bob retracts in alice's session", err, memoryapi.CodeSessionNotFound)

		// The agent worker recalls for each session its tenant's items.
		rec, err := r.worker.Memory().Recall(ctx, memoryapi.RecallRequest{Session: "a1", Query: secret, K: memoryapi.MaxK, Agent: "coder"})
		if err != nil {
			t.Fatal(err)
		}
		only(phase+": the worker's recall for a1", rec.Hits, acme, globex)
		rec, err = r.worker.Memory().Recall(ctx, memoryapi.RecallRequest{Session: "b1", Query: secret, K: memoryapi.MaxK, Agent: "coder"})
		if err != nil {
			t.Fatal(err)
		}
		only(phase+": the worker's recall for b1", rec.Hits, globex, acme)
		// A service naming no session searches every tenant.
		res, err = r.worker.Memory().Search(ctx, memoryapi.SearchRequest{Query: secret, K: memoryapi.MaxK})
		if err != nil {
			t.Fatal(err)
		}
		only(phase+": a service's search", res.Hits, append(slices.Clone(acme), globex...), nil)
		if len(res.Hits) != 4 || res.Hits[0].ItemID != b1.ItemID {
			t.Errorf("%s: a service's search ranks %v, want b1's best item first of 4", phase, hitIDs(res.Hits))
		}

		// Nothing of bob's reached alice's item.
		h, err := am.History(ctx, a1.ItemID)
		if err != nil || len(h.Records) != 1 || h.Records[0].Actor != "acme/alice" {
			t.Fatalf("%s: alice's item's history %+v %v", phase, h.Records, err)
		}
	}
	check("before restart")

	// The memory event names alice as whom it was for, the service as its
	// proposer.
	st, err := r.alice.State(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	log, err := r.alice.Log(ctx, "a1", client.Range{From: 1})
	if err != nil {
		t.Fatal(err)
	}
	var written, recalled int
	for _, ev := range log {
		switch ev.Type {
		case events.TypeMemoryWritten:
			written++
			if ev.Actor != "rath/memory-svc" || ev.OnBehalf != "acme/alice" {
				t.Errorf("memory.written stamped rathactor %q rathfor %q, want rath/memory-svc for acme/alice", ev.Actor, ev.OnBehalf)
			}
		case events.TypeMemoryRecalled:
			recalled++
			if ev.Actor != "rath/memory-svc" || ev.OnBehalf != "rath/agent-worker" {
				t.Errorf("memory.recalled stamped rathactor %q rathfor %q, want rath/memory-svc for rath/agent-worker", ev.Actor, ev.OnBehalf)
			}
		}
	}
	if written != 2 || recalled != 1 {
		t.Fatalf("a1 holds %d writes and %d recalls, want 2 and 1", written, recalled)
	}
	for _, me := range st.Memory {
		want := map[string]string{"written": "acme/alice", "recalled": "rath/agent-worker"}[me.Kind]
		if me.Actor != want {
			t.Errorf("state: memory %s by %q, want %q", me.Kind, me.Actor, want)
		}
	}

	r.restartMemory(t)
	check("after restart")
}

func wantCodeOf(t *testing.T, what string, err error, code api.Code) {
	t.Helper()
	if api.CodeOf(err) != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
}
