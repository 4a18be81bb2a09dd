package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/memoryapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/memory-svc/service"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type rig struct {
	nc  *nats.Conn
	c   *client.Client
	mem *client.Memory
}

// setup runs a ledger and n memory services (each on its own connection,
// like separate processes) on one embedded JetStream.
func setup(t *testing.T, n int) *rig {
	t.Helper()
	ns, nc := natstest.Start(t)
	testrig.Ledger(t, ns.ClientURL())
	for range n {
		mnc := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleMemory)
		testrig.Run(t, "memory service", func(ctx context.Context) error { return service.Run(ctx, mnc, service.DefaultConfig(), quiet) })
	}
	c, err := client.New(nc, client.WithTimeout(10*time.Second), client.WithRetryFor(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return &rig{nc: nc, c: c, mem: c.Memory()}
}

func (r *rig) start(t *testing.T, id string) {
	t.Helper()
	if _, err := r.c.Start(context.Background(), id, events.SessionStarted{Task: "remember things"}); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) emit(t *testing.T, id string, data any) api.Ack {
	t.Helper()
	a, err := r.c.Emit(context.Background(), id, data)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (r *rig) add(t *testing.T, req memoryapi.AddRequest) memoryapi.Record {
	t.Helper()
	if req.Evidence == "" {
		req.Evidence = memoryapi.EvidenceToolResult
	}
	rep, err := r.mem.Add(context.Background(), req)
	if err != nil {
		t.Fatalf("add %q: %v", req.Content, err)
	}
	return rep.Record
}

func (r *rig) recall(t *testing.T, req memoryapi.RecallRequest) memoryapi.RecallReply {
	t.Helper()
	rep, err := r.mem.Recall(context.Background(), req)
	if err != nil {
		t.Fatalf("recall %q: %v", req.Query, err)
	}
	return rep
}

func ids(hs []memoryapi.Hit) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = fmt.Sprintf("%s@%d", h.ItemID, h.Version)
	}
	return out
}

// decodeAt reads event seq of a session's logical log.
func (r *rig) decodeAt(t *testing.T, id string, seq uint64) (events.Stored, any) {
	t.Helper()
	evs, err := r.c.Log(context.Background(), id, client.Range{From: seq, To: seq})
	if err != nil || len(evs) != 1 {
		t.Fatalf("log of %s at %d: %v (%d events)", id, seq, err, len(evs))
	}
	d, err := evs[0].Decode()
	if err != nil {
		t.Fatal(err)
	}
	return evs[0], d
}

// The component test: the real wiring in-process, driven through the bus,
// stopped by its context, returning nil.
func TestMemoryServiceRunsAndStops(t *testing.T) {
	ns, nc := natstest.Start(t)
	ctx := context.Background()
	l := testrig.Ledger(t, ns.ClientURL())
	mnc := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleMemory)
	m := testrig.Run(t, "memory service", func(ctx context.Context) error { return service.Run(ctx, mnc, service.DefaultConfig(), quiet) })
	c, _ := client.New(nc, client.WithRetryFor(30*time.Second))
	if _, err := c.Start(ctx, "s", events.SessionStarted{}); err != nil {
		t.Fatal(err)
	}
	rep, err := c.Memory().Add(ctx, memoryapi.AddRequest{Session: "s", Content: "hello memory", Scope: "project:rath", Evidence: memoryapi.EvidenceHumanCorrection})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Record.Version != 1 || rep.Ack.Session != "s" {
		t.Fatalf("add = %+v", rep)
	}
	if err := m.Stop(); err != nil {
		t.Fatalf("memory service stopped with %v", err)
	}
	// Nobody answers any more.
	if _, err := client.New(nc, client.WithRetryFor(0)); err != nil {
		t.Fatal(err)
	}
	q, _ := client.New(nc, client.WithRetryFor(0), client.WithTimeout(time.Second))
	if _, err := q.Memory().Show(ctx, rep.Record.ItemID); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("show after stop: %v, want no responders", err)
	}
	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}
}

// Every write is a new version; none is overwritten, and the stream holds
// one message per record.
func TestMemoryVersionsNeverOverwritten(t *testing.T) {
	r := setup(t, 1)
	r.start(t, "s1")
	v1 := r.add(t, memoryapi.AddRequest{Session: "s1", Content: "the port default is 8080", Scope: "project:rath", Tags: []string{"config"}})
	v2 := r.add(t, memoryapi.AddRequest{ItemID: v1.ItemID, Session: "s1", Content: "the port default is 9090", Scope: "project:rath", Tags: []string{"config"}})
	if v1.Version != 1 || v2.Version != 2 || v2.ItemID != v1.ItemID {
		t.Fatalf("versions %d, %d of %s/%s", v1.Version, v2.Version, v1.ItemID, v2.ItemID)
	}
	h, err := r.mem.History(context.Background(), v1.ItemID)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Records) != 2 || h.Records[0].Content != "the port default is 8080" || h.Records[1].Content != "the port default is 9090" {
		t.Fatalf("history = %+v", h.Records)
	}
	item, err := r.mem.Show(context.Background(), v1.ItemID)
	if err != nil {
		t.Fatal(err)
	}
	if item.Current == nil || item.Current.Version != 2 || item.Versions != 2 {
		t.Fatalf("show = %+v", item)
	}
	js, _ := jetstream.New(r.nc)
	st, err := js.Stream(context.Background(), memoryapi.Stream)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 2; seq++ {
		m, err := st.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		var rec memoryapi.Record
		if err := json.Unmarshal(m.Data, &rec); err != nil || rec.Version != int(seq) || m.Subject != memoryapi.ItemSubject(v1.ItemID) {
			t.Fatalf("message %d: %s %+v %v", seq, m.Subject, rec, err)
		}
	}
	// The store refuses deletes: history cannot be rewritten through it.
	if err := st.DeleteMsg(context.Background(), 1); err == nil {
		t.Fatal("deleting a memory record succeeded")
	}
}

// Recall ranks by BM25 and honours scope and tag filters.
func TestMemoryRecallRanksAndFilters(t *testing.T) {
	r := setup(t, 1)
	r.start(t, "s")
	cfg := r.add(t, memoryapi.AddRequest{Session: "s", Content: "config defaults must be applied before flag parsing; flag parsing overwrites config defaults", Scope: "project:rath", Tags: []string{"config", "go"}})
	flag := r.add(t, memoryapi.AddRequest{Session: "s", Content: "flag parsing uses the standard library flag package", Scope: "project:rath", Tags: []string{"go"}})
	other := r.add(t, memoryapi.AddRequest{Session: "s", Content: "config defaults live in defaults.yaml", Scope: "project:other", Tags: []string{"config"}})
	r.add(t, memoryapi.AddRequest{Session: "s", Content: "the coder prefers table tests", Scope: "agent:coder"})

	got := r.recall(t, memoryapi.RecallRequest{Session: "s", Query: "config defaults flag parsing"})
	if len(got.Hits) != 3 || got.Hits[0].ItemID != cfg.ItemID {
		t.Fatalf("ranking: %v, want %s first of 3", ids(got.Hits), cfg.ItemID)
	}
	for i := 1; i < len(got.Hits); i++ {
		if got.Hits[i].Score > got.Hits[i-1].Score {
			t.Fatalf("hits not sorted by score: %+v", got.Hits)
		}
	}
	got = r.recall(t, memoryapi.RecallRequest{Session: "s", Query: "config defaults flag parsing", Filter: memoryapi.Filter{Scopes: []string{"project:rath"}}})
	if !slices.Equal(ids(got.Hits), []string{cfg.ItemID + "@1", flag.ItemID + "@1"}) {
		t.Fatalf("scope filter: %v", ids(got.Hits))
	}
	got = r.recall(t, memoryapi.RecallRequest{Session: "s", Query: "config defaults", Filter: memoryapi.Filter{Tags: []string{"config"}}, K: 1})
	if len(got.Hits) != 1 || got.Hits[0].ItemID != other.ItemID && got.Hits[0].ItemID != cfg.ItemID {
		t.Fatalf("tag filter with k=1: %v", ids(got.Hits))
	}
	got = r.recall(t, memoryapi.RecallRequest{Session: "s", Query: "flag", Filter: memoryapi.Filter{Tags: []string{"config", "go"}}})
	if !slices.Equal(ids(got.Hits), []string{cfg.ItemID + "@1"}) {
		t.Fatalf("every tag must match: %v", ids(got.Hits))
	}
	got = r.recall(t, memoryapi.RecallRequest{Session: "s", Query: "kubernetes"})
	if len(got.Hits) != 0 {
		t.Fatalf("unrelated query found %v", ids(got.Hits))
	}
	// Search is the same ranking, recorded nowhere.
	before, _ := r.c.State(context.Background(), "s")
	sr, err := r.mem.Search(context.Background(), memoryapi.SearchRequest{Query: "config defaults flag parsing"})
	if err != nil || len(sr.Hits) != 3 || sr.Hits[0].ItemID != cfg.ItemID || sr.Ack != nil {
		t.Fatalf("search = %+v, %v", sr, err)
	}
	after, _ := r.c.State(context.Background(), "s")
	if after.Seq != before.Seq {
		t.Fatalf("search appended to the session: head %d → %d", before.Seq, after.Seq)
	}
}

// Writes and recalls are recorded in the session that caused them, with
// their provenance and the versions and scores recalled.
func TestMemoryEventsRecordedInSession(t *testing.T) {
	r := setup(t, 1)
	r.start(t, "s")
	evidence := r.emit(t, "s", &events.ToolCompleted{CallID: "c1", Tool: "shell", Result: "FAIL: port 0"})
	w := r.add(t, memoryapi.AddRequest{Session: "s", Content: "apply config defaults before parsing flags", Scope: "project:rath",
		Tags: []string{"config"}, Evidence: memoryapi.EvidenceFailedAttempt, EventIDs: []string{evidence.ID}})
	rep, err := r.mem.Add(context.Background(), memoryapi.AddRequest{ItemID: w.ItemID, Session: "s", Content: "apply config defaults before parsing flags, in main",
		Scope: "project:rath", Evidence: memoryapi.EvidenceHumanCorrection})
	if err != nil {
		t.Fatal(err)
	}
	ev, d := r.decodeAt(t, "s", rep.Ack.Seq)
	mw, ok := d.(*events.MemoryWritten)
	if !ok || ev.ID != rep.Record.EventID || mw.ItemID != w.ItemID || mw.Version != 2 || mw.Provenance.Evidence != memoryapi.EvidenceHumanCorrection || mw.Scope != "project:rath" {
		t.Fatalf("written event %s: %+v", ev.Type, d)
	}
	_, d = r.decodeAt(t, "s", rep.Ack.Seq-1)
	if first := d.(*events.MemoryWritten); first.Version != 1 || !slices.Equal(first.Provenance.EventIDs, []string{evidence.ID}) || first.Provenance.Session != "s" {
		t.Fatalf("first written event: %+v", first)
	}

	got := r.recall(t, memoryapi.RecallRequest{Session: "s", Query: "config defaults", Agent: "coder", TurnID: "turn-1", Filter: memoryapi.Filter{Scopes: []string{"project:rath"}}})
	if got.Ack == nil || len(got.Hits) != 1 {
		t.Fatalf("recall = %+v", got)
	}
	_, d = r.decodeAt(t, "s", got.Ack.Seq)
	mr, ok := d.(*events.MemoryRecalled)
	if !ok || mr.Query != "config defaults" || mr.Agent != "coder" || mr.TurnID != "turn-1" || !slices.Equal(mr.Scopes, []string{"project:rath"}) ||
		len(mr.Items) != 1 || mr.Items[0].ItemID != w.ItemID || mr.Items[0].Version != 2 || mr.Items[0].Score != got.Hits[0].Score {
		t.Fatalf("recalled event: %+v", d)
	}
	// A retried recall (same request ID) is recorded once.
	req := memoryapi.RecallRequest{RequestID: "fixed-1", Session: "s", Query: "config"}
	a := r.recall(t, req)
	b := r.recall(t, req)
	if a.Ack.Seq != b.Ack.Seq || !b.Ack.Duplicate {
		t.Fatalf("retried recall acked %+v then %+v", a.Ack, b.Ack)
	}
	// Justify resolves the provenance to the stored evidence events.
	j, err := r.mem.Justify(context.Background(), memoryapi.JustifyRequest{ItemID: w.ItemID})
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Versions) != 2 || len(j.Versions[0].Evidence) != 1 || len(j.Versions[1].Evidence) != 0 ||
		j.Versions[0].Provenance.Evidence != memoryapi.EvidenceFailedAttempt || j.Versions[0].WrittenIn.EventID != w.EventID {
		t.Fatalf("justify = %+v", j)
	}
	stored, err := events.ParseStored(j.Versions[0].Evidence[0])
	if err != nil || stored.ID != evidence.ID || stored.Type != events.TypeToolCompleted {
		t.Fatalf("evidence = %+v, %v", stored, err)
	}
}

// Retraction is honoured by later recalls; restore writes a new version
// with the old content; history shows all of it.
func TestMemoryRetractAndRestore(t *testing.T) {
	r := setup(t, 1)
	r.start(t, "s")
	ctx := context.Background()
	v1 := r.add(t, memoryapi.AddRequest{Session: "s", Content: "tests run with make test", Scope: "project:rath"})
	r.add(t, memoryapi.AddRequest{ItemID: v1.ItemID, Session: "s", Content: "tests run with go test ./...", Scope: "project:rath"})
	q := memoryapi.RecallRequest{Session: "s", Query: "tests run"}
	if got := r.recall(t, q); !slices.Equal(ids(got.Hits), []string{v1.ItemID + "@2"}) {
		t.Fatalf("before retraction: %v", ids(got.Hits))
	}
	// Retracting the newest version rolls back to the one before.
	rr, err := r.mem.Retract(ctx, memoryapi.RetractRequest{ItemID: v1.ItemID, Version: 2, Session: "s", By: "ana", Reason: "wrong command"})
	if err != nil {
		t.Fatal(err)
	}
	_, d := r.decodeAt(t, "s", rr.Ack.Seq)
	if mr, ok := d.(*events.MemoryRetracted); !ok || mr.ItemID != v1.ItemID || mr.Version != 2 || mr.By != "ana" || mr.Reason != "wrong command" {
		t.Fatalf("retracted event: %+v", d)
	}
	if got := r.recall(t, q); !slices.Equal(ids(got.Hits), []string{v1.ItemID + "@1"}) {
		t.Fatalf("after retracting v2: %v", ids(got.Hits))
	}
	// Retracting the item hides every version.
	if _, err := r.mem.Retract(ctx, memoryapi.RetractRequest{ItemID: v1.ItemID, Session: "s", By: "ana", Reason: "obsolete"}); err != nil {
		t.Fatal(err)
	}
	if got := r.recall(t, q); len(got.Hits) != 0 {
		t.Fatalf("after retracting the item: %v", ids(got.Hits))
	}
	if item, _ := r.mem.Show(ctx, v1.ItemID); item.Current != nil || !slices.Equal(item.Retracted, []int{1, 2}) {
		t.Fatalf("show after retraction: %+v", item)
	}
	// Restoring version 2 writes version 3 with its content.
	rs, err := r.mem.Restore(ctx, memoryapi.RestoreRequest{ItemID: v1.ItemID, Version: 2, Session: "s", By: "bob", Reason: "it was right"})
	if err != nil {
		t.Fatal(err)
	}
	if rs.Record.Version != 3 || rs.Record.RestoredFrom != 2 || rs.Record.Content != "tests run with go test ./..." {
		t.Fatalf("restore = %+v", rs.Record)
	}
	_, d = r.decodeAt(t, "s", rs.Ack.Seq)
	if mw, ok := d.(*events.MemoryWritten); !ok || mw.RestoredFrom != 2 || mw.Version != 3 {
		t.Fatalf("restore event: %+v", d)
	}
	if got := r.recall(t, q); !slices.Equal(ids(got.Hits), []string{v1.ItemID + "@3"}) {
		t.Fatalf("after restore: %v", ids(got.Hits))
	}
	h, err := r.mem.History(ctx, v1.ItemID)
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, rec := range h.Records {
		ops = append(ops, fmt.Sprintf("%s%d", rec.Op, rec.Version))
	}
	if !slices.Equal(ops, []string{"write1", "write2", "retract2", "retract0", "write3"}) {
		t.Fatalf("history ops = %v", ops)
	}
}

// Bad requests are refused with a code and a message that says what to fix.
func TestMemoryBadInput(t *testing.T) {
	r := setup(t, 1)
	r.start(t, "s")
	ctx := context.Background()
	item := r.add(t, memoryapi.AddRequest{Session: "s", Content: "x marks the spot", Scope: "user:ana"})
	good := memoryapi.AddRequest{Session: "s", Content: "c", Scope: "project:rath", Evidence: memoryapi.EvidenceToolResult}
	with := func(f func(*memoryapi.AddRequest)) memoryapi.AddRequest { q := good; f(&q); return q }
	for _, tc := range []struct {
		name string
		call func() error
		code api.Code
	}{
		{"unknown scope kind", func() error {
			_, err := r.mem.Add(ctx, with(func(q *memoryapi.AddRequest) { q.Scope = "global:x" }))
			return err
		}, memoryapi.CodeInvalidScope},
		{"scope without name", func() error {
			_, err := r.mem.Add(ctx, with(func(q *memoryapi.AddRequest) { q.Scope = "project" }))
			return err
		}, memoryapi.CodeInvalidScope},
		{"empty content", func() error {
			_, err := r.mem.Add(ctx, with(func(q *memoryapi.AddRequest) { q.Content = "  " }))
			return err
		}, memoryapi.CodeMalformed},
		{"unknown evidence", func() error {
			_, err := r.mem.Add(ctx, with(func(q *memoryapi.AddRequest) { q.Evidence = "hunch" }))
			return err
		}, memoryapi.CodeMalformed},
		{"no session", func() error {
			_, err := r.mem.Add(ctx, with(func(q *memoryapi.AddRequest) { q.Session = "" }))
			return err
		}, memoryapi.CodeInvalidSession},
		{"missing session", func() error {
			_, err := r.mem.Add(ctx, with(func(q *memoryapi.AddRequest) { q.Session = "nope" }))
			return err
		}, api.CodeNotFound},
		{"unknown evidence event", func() error {
			_, err := r.mem.Add(ctx, with(func(q *memoryapi.AddRequest) { q.EventIDs = []string{"not-an-event"} }))
			return err
		}, memoryapi.CodeUnknownEvent},
		{"unknown item", func() error { _, err := r.mem.Show(ctx, "mem-nope"); return err }, memoryapi.CodeItemNotFound},
		{"retract unknown item", func() error {
			_, err := r.mem.Retract(ctx, memoryapi.RetractRequest{ItemID: "mem-nope", Session: "s", By: "a", Reason: "r"})
			return err
		}, memoryapi.CodeItemNotFound},
		{"retract without reason", func() error {
			_, err := r.mem.Retract(ctx, memoryapi.RetractRequest{ItemID: item.ItemID, Session: "s", By: "a"})
			return err
		}, memoryapi.CodeMalformed},
		{"restore unknown version", func() error {
			_, err := r.mem.Restore(ctx, memoryapi.RestoreRequest{ItemID: item.ItemID, Version: 7, Session: "s"})
			return err
		}, memoryapi.CodeVersionNotFound},
		{"recall without session", func() error { _, err := r.mem.Recall(ctx, memoryapi.RecallRequest{Query: "x"}); return err }, memoryapi.CodeInvalidSession},
		{"recall in missing session", func() error {
			_, err := r.mem.Recall(ctx, memoryapi.RecallRequest{Session: "nope", Query: "x"})
			return err
		}, api.CodeNotFound},
		{"recall bad scope filter", func() error {
			_, err := r.mem.Recall(ctx, memoryapi.RecallRequest{Session: "s", Query: "x", Filter: memoryapi.Filter{Scopes: []string{"team:x"}}})
			return err
		}, memoryapi.CodeInvalidScope},
		{"empty query", func() error { _, err := r.mem.Search(ctx, memoryapi.SearchRequest{Query: ""}); return err }, memoryapi.CodeMalformed},
		{"present in missing session", func() error { _, err := r.mem.Present(ctx, memoryapi.PresentRequest{Session: "nope"}); return err }, api.CodeNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var e *api.Error
			if !errors.As(err, &e) || e.Code != tc.code || e.Message == "" {
				t.Fatalf("err = %v, want code %s", err, tc.code)
			}
		})
	}
	// Nothing was stored for the refused writes: the item count is one.
	sr, err := r.mem.Search(ctx, memoryapi.SearchRequest{Query: "c x marks spot"})
	if err != nil || len(sr.Hits) != 1 {
		t.Fatalf("search after refusals: %+v, %v", sr, err)
	}
	// A body that is not JSON is malformed.
	reply, err := r.nc.Request(events.DefaultClient.Memory(memoryapi.ReqAdd), []byte("{"), 5*time.Second)
	if err != nil || reply.Header.Get(api.HeaderError) != string(memoryapi.CodeMalformed) {
		t.Fatalf("non-JSON body: %v %v", reply, err)
	}
}

// Two memory services writing one item at once number distinct versions,
// none lost.
func TestMemoryConcurrentWritersTwoInstances(t *testing.T) {
	r := setup(t, 2)
	r.start(t, "s")
	ctx := context.Background()
	first := r.add(t, memoryapi.AddRequest{Session: "s", Content: "v1", Scope: "project:rath"})
	const writers = 16
	var wg sync.WaitGroup
	versions := make([]int, writers)
	errs := make([]error, writers)
	for i := range writers {
		wg.Go(func() {
			rep, err := r.mem.Add(ctx, memoryapi.AddRequest{ItemID: first.ItemID, Session: "s", Content: fmt.Sprintf("writer %d", i),
				Scope: "project:rath", Evidence: memoryapi.EvidenceToolResult})
			versions[i], errs[i] = rep.Record.Version, err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	slices.Sort(versions)
	for i, v := range versions {
		if v != i+2 {
			t.Fatalf("versions %v: want 2..%d once each", versions, writers+1)
		}
	}
	h, err := r.mem.History(ctx, first.ItemID)
	if err != nil || len(h.Records) != writers+1 {
		t.Fatalf("history has %d records, %v", len(h.Records), err)
	}
	st, _ := r.c.State(ctx, "s")
	written := 0
	for _, m := range st.Memory {
		if m.Kind == "written" {
			written++
		}
	}
	if written != writers+1 {
		t.Fatalf("session recorded %d writes, want %d", written, writers+1)
	}
}

// A write to a session that has ended is refused (session_closed, exit 4 in
// rath memory add) and stores nothing: RATH_MEMORY holds no record of it. It
// stored the version, then retracted it when the ledger refused the event.
func TestMemoryWriteToClosedSessionStoresNothing(t *testing.T) {
	r := setup(t, 1)
	ctx := context.Background()
	r.start(t, "s")
	r.emit(t, "s", &events.SessionClosed{Reason: "done", Outcome: "succeeded"})
	for name, write := range map[string]func() error{
		"add": func() error {
			_, err := r.mem.Add(ctx, memoryapi.AddRequest{Session: "s", Content: "too late", Scope: "project:rath", Evidence: memoryapi.EvidenceToolResult})
			return err
		},
		"add a version": func() error {
			_, err := r.mem.Add(ctx, memoryapi.AddRequest{Session: "s", ItemID: "mem-late", Content: "too late", Scope: "project:rath", Evidence: memoryapi.EvidenceToolResult})
			return err
		},
	} {
		if err := write(); api.CodeOf(err) != api.CodeClosed {
			t.Fatalf("%s in a closed session: %v, want %s", name, err, api.CodeClosed)
		}
	}
	js, err := jetstream.New(r.nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, memoryapi.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Fatalf("RATH_MEMORY holds %d records after refused writes", info.State.Msgs)
	}
}
