// Package memory is Rath's memory with provenance: versioned items stored
// through a Backend, a BM25 index over their current versions, and the
// provenance questions answered from the session logs. Every recall, write
// and retraction is recorded in the session that caused it, through the
// ledger.
package memory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/memoryapi"
)

// Source is the CloudEvents source of the events the memory service appends.
const Source = "rath/memory-svc"

// writeAttempts bounds how often a write re-reads an item that other
// writers keep changing.
const writeAttempts = 16

// Memory serves the memory API on a backend, recording in sessions through
// the ledger client.
type Memory struct {
	backend  Backend
	items    *Items
	sessions *Sessions
	ledger   *client.Client
	index    *eventstore.Store // nil: a session's tenant comes from its state
	states   *fold.Cache       // nil: states come from the ledger
	now      func() time.Time
}

// Option configures a Memory.
type Option func(*Memory)

// WithClock sets the clock of record times (tests).
func WithClock(now func() time.Time) Option { return func(m *Memory) { m.now = now } }

// WithSessionIndex lets a request read its session's tenant (and that it
// exists) from the ledger's session index, a key-value read, before
// folding the session's state (the fallback, and the authority).
func WithSessionIndex(store *eventstore.Store) Option {
	return func(m *Memory) { m.index = store }
}

// New returns a Memory. items must be following backend, sessions the
// sessions stream.
func New(backend Backend, items *Items, sessions *Sessions, ledger *client.Client, opts ...Option) *Memory {
	m := &Memory{backend: backend, items: items, sessions: sessions, ledger: ledger, now: time.Now}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Add writes a new item, or a new version of req.ItemID.
func (m *Memory) Add(ctx context.Context, req memoryapi.AddRequest) (memoryapi.WriteReply, error) {
	if err := validateWrite(req.Session, req.Evidence, req.EventIDs); err != nil {
		return memoryapi.WriteReply{}, err
	}
	if req.ItemID != "" {
		if err := memoryapi.ValidateItemID(req.ItemID); err != nil {
			return memoryapi.WriteReply{}, memoryapi.Errorf(memoryapi.CodeMalformed, "%v", err)
		}
	}
	if strings.TrimSpace(req.Content) == "" {
		return memoryapi.WriteReply{}, memoryapi.Errorf(memoryapi.CodeMalformed, "content is empty")
	}
	if len(req.Content) > memoryapi.MaxContent {
		return memoryapi.WriteReply{}, memoryapi.Errorf(memoryapi.CodeMalformed, "content is %d bytes, at most %d", len(req.Content), memoryapi.MaxContent)
	}
	if _, _, err := memoryapi.ParseScope(req.Scope); err != nil {
		return memoryapi.WriteReply{}, memoryapi.Errorf(memoryapi.CodeInvalidScope, "%v", err)
	}
	if err := memoryapi.ValidateTags(req.Tags); err != nil {
		return memoryapi.WriteReply{}, memoryapi.Errorf(memoryapi.CodeMalformed, "%v", err)
	}
	tenant, err := m.admitSession(ctx, req.Session)
	if err != nil {
		return memoryapi.WriteReply{}, err
	}
	rec := memoryapi.Record{
		ItemID: req.ItemID, Op: memoryapi.OpWrite,
		Content: req.Content, Tags: req.Tags, Scope: req.Scope,
		Provenance: &events.Provenance{Session: req.Session, EventIDs: req.EventIDs, Evidence: req.Evidence},
		Tenant:     tenant, Actor: asker(ctx).String(),
		Session: req.Session, RequestID: req.RequestID,
	}
	if rec.RequestID == "" {
		rec.RequestID = events.NewID()
	}
	if rec.ItemID == "" {
		// Derived from the request, so that a retried add names one item.
		rec.ItemID = "mem-" + events.DerivedID("memory.item", rec.RequestID)
	}
	return m.writeVersion(ctx, rec, false)
}

// Restore writes a new version of an item with the content, tags and scope
// of an earlier version.
func (m *Memory) Restore(ctx context.Context, req memoryapi.RestoreRequest) (memoryapi.WriteReply, error) {
	if req.Evidence == "" {
		req.Evidence = memoryapi.EvidenceHumanCorrection
	}
	if err := validateWrite(req.Session, req.Evidence, req.EventIDs); err != nil {
		return memoryapi.WriteReply{}, err
	}
	if err := memoryapi.ValidateItemID(req.ItemID); err != nil {
		return memoryapi.WriteReply{}, memoryapi.Errorf(memoryapi.CodeMalformed, "%v", err)
	}
	if req.Version < 1 {
		return memoryapi.WriteReply{}, memoryapi.Errorf(memoryapi.CodeMalformed, "restore needs the version to restore (from 1)")
	}
	tenant, err := m.admitSession(ctx, req.Session)
	if err != nil {
		return memoryapi.WriteReply{}, err
	}
	if err := m.syncItems(ctx); err != nil {
		return memoryapi.WriteReply{}, err
	}
	_, recs, err := m.visibleItem(tenant, req.ItemID)
	if err != nil {
		return memoryapi.WriteReply{}, err
	}
	i := slices.IndexFunc(recs, func(r memoryapi.Record) bool { return r.Op == memoryapi.OpWrite && r.Version == req.Version })
	if i < 0 {
		return memoryapi.WriteReply{}, memoryapi.Errorf(memoryapi.CodeVersionNotFound, "memory item %q has no version %d", req.ItemID, req.Version)
	}
	old := recs[i]
	rec := memoryapi.Record{
		ItemID: req.ItemID, Op: memoryapi.OpWrite,
		Content: old.Content, Tags: old.Tags, Scope: old.Scope, RestoredFrom: req.Version,
		Provenance: &events.Provenance{Session: req.Session, EventIDs: req.EventIDs, Evidence: req.Evidence},
		By:         req.By, Reason: req.Reason,
		Tenant: tenant, Actor: asker(ctx).String(),
		Session: req.Session, RequestID: req.RequestID,
	}
	return m.writeVersion(ctx, rec, true)
}

func validateWrite(session, evidence string, eventIDs []string) error {
	if err := validSession(session); err != nil {
		return err
	}
	if !memoryapi.ValidEvidence(evidence) {
		return memoryapi.Errorf(memoryapi.CodeMalformed, "evidence %q: want one of %s", evidence, strings.Join(memoryapi.Evidences, ", "))
	}
	if len(eventIDs) > memoryapi.MaxEventIDs {
		return memoryapi.Errorf(memoryapi.CodeMalformed, "%d event IDs, at most %d", len(eventIDs), memoryapi.MaxEventIDs)
	}
	if slices.Contains(eventIDs, "") {
		return memoryapi.Errorf(memoryapi.CodeMalformed, "an event ID is empty")
	}
	return nil
}

func validSession(id string) error {
	if id == "" {
		return memoryapi.Errorf(memoryapi.CodeInvalidSession, "session is missing: name the session that causes the request (it records it)")
	}
	if err := events.ValidateSessionID(id); err != nil {
		return memoryapi.Errorf(memoryapi.CodeInvalidSession, "%v", err)
	}
	return nil
}

// writeVersion resolves the provenance, stores the version, then records
// it in the session, on behalf of whoever asked. The caller admitted the
// session and set the record's tenant (the session's). The version is
// stored first because only the store can number it, and RATH_MEMORY
// denies deletes: so a session that has ended, which the ledger would
// refuse the event, is refused here before anything is stored. A session
// that ends between that check and the event (or refuses it otherwise)
// gets the version retracted again (by the service, saying why), so
// recall never serves a version its session does not record.
func (m *Memory) writeVersion(ctx context.Context, rec memoryapi.Record, mustExist bool) (memoryapi.WriteReply, error) {
	if rec.RequestID == "" {
		rec.RequestID = events.NewID()
	}
	if err := m.checkOpen(ctx, rec.Session); err != nil {
		return memoryapi.WriteReply{}, err
	}
	seqs, err := m.resolve(ctx, rec.Session, rec.Provenance.EventIDs)
	if err != nil {
		return memoryapi.WriteReply{}, err
	}
	rec.EventSeqs = seqs
	rec.Time = m.now().UTC()
	stored, err := m.append(ctx, rec, mustExist)
	if err != nil {
		return memoryapi.WriteReply{}, err
	}
	ack, err := m.ledger.Emit(ctx, stored.Session, &events.MemoryWritten{
		ItemID: stored.ItemID, Version: stored.Version, Content: stored.Content, Tags: stored.Tags, Scope: stored.Scope,
		Provenance: *stored.Provenance, RestoredFrom: stored.RestoredFrom,
	}, append(onBehalf(ctx), events.WithID(stored.EventID))...)
	if err != nil {
		if api.Permanent(err) {
			m.void(ctx, stored, err)
		}
		return memoryapi.WriteReply{}, fmt.Errorf("record version %d of %s in session %s: %w", stored.Version, stored.ItemID, stored.Session, err)
	}
	return memoryapi.WriteReply{Record: stored, Ack: ack}, nil
}

// checkOpen refuses a write to a session that has ended, with the code the
// ledger would refuse its event with (session_closed), before the write
// stores anything.
func (m *Memory) checkOpen(ctx context.Context, session string) error {
	st, err := m.state(ctx, session, 0)
	if err != nil {
		return fmt.Errorf("session %s: %w", session, err)
	}
	if st.Status.Ended() {
		return api.Errorf(api.CodeClosed, "session %s is %s (at %d): it records no memory write; fork it to continue", session, st.Status, st.Seq)
	}
	return nil
}

// void retracts a version its session refused to record. If even that
// fails the version stays recallable without its session event: the error
// the caller gets says the write failed, and retrying it completes it.
func (m *Memory) void(ctx context.Context, v memoryapi.Record, cause error) {
	ctx = context.WithoutCancel(ctx)
	_, _ = m.append(ctx, memoryapi.Record{
		ItemID: v.ItemID, Op: memoryapi.OpRetract, Version: v.Version,
		By: Source, Reason: fmt.Sprintf("session %s refused the rath.memory.written event: %v", v.Session, cause),
		Tenant: v.Tenant, Actor: Self.String(),
		Session: v.Session, RequestID: v.RequestID + "/void", Time: m.now().UTC(),
	}, true)
}

// append stores rec as the item's next record, numbering a write's version
// from the item's last record, retrying while other writers get there
// first. A record of the same request found as the item's last record is
// the earlier attempt of this request (its ack was lost): it is returned.
// An item of another tenant than rec's is refused before anything else
// (every record carries its item's tenant, and the append is conditional
// on the last record read, so two tenants racing for a new item ID cannot
// both have it): as missing where the item must exist, else as taken.
func (m *Memory) append(ctx context.Context, rec memoryapi.Record, mustExist bool) (memoryapi.Record, error) {
	for attempt := range writeAttempts {
		last, pos, err := m.backend.Last(ctx, rec.ItemID)
		if err != nil {
			return memoryapi.Record{}, memoryapi.Errorf(memoryapi.CodeUnavailable, "%v", err)
		}
		if last != nil && events.TenantOrDefault(last.Tenant) != events.TenantOrDefault(rec.Tenant) {
			if mustExist {
				return memoryapi.Record{}, itemNotFound(rec.ItemID)
			}
			return memoryapi.Record{}, memoryapi.Errorf(memoryapi.CodeItemExists, "memory item ID %q is taken: choose another", rec.ItemID)
		}
		if last != nil && last.RequestID == rec.RequestID && last.Op == rec.Op {
			return *last, nil
		}
		if last == nil && mustExist {
			return memoryapi.Record{}, itemNotFound(rec.ItemID)
		}
		n := 0
		if last != nil {
			n = last.Versions
		}
		switch rec.Op {
		case memoryapi.OpWrite:
			rec.Version, rec.Versions = n+1, n+1
			rec.EventID = events.DerivedID("memory.written", rec.ItemID, fmt.Sprint(rec.Version))
		case memoryapi.OpRetract:
			if rec.Version > n {
				return memoryapi.Record{}, memoryapi.Errorf(memoryapi.CodeVersionNotFound, "memory item %q has no version %d", rec.ItemID, rec.Version)
			}
			rec.Versions = n
		}
		seq, err := m.backend.Append(ctx, rec, pos, events.DerivedID("memory.record", rec.RequestID, rec.Op))
		if errors.Is(err, ErrConflict) {
			// Jittered, growing pause: writers of one item take turns.
			pause := time.Duration(rand.IntN(1+attempt)+1) * time.Millisecond
			select {
			case <-ctx.Done():
				return memoryapi.Record{}, memoryapi.Errorf(memoryapi.CodeUnavailable, "write %s: %v", rec.ItemID, ctx.Err())
			case <-time.After(pause):
			}
			continue
		}
		if err != nil {
			return memoryapi.Record{}, memoryapi.Errorf(memoryapi.CodeUnavailable, "%v", err)
		}
		rec.Seq = seq
		return rec, nil
	}
	return memoryapi.Record{}, memoryapi.Errorf(memoryapi.CodeConflict, "memory item %q: other writers kept changing it (%d attempts)", rec.ItemID, writeAttempts)
}

// resolve finds each event ID in the session's logical log and returns its
// sequence. The caller checked that the session exists (admitSession).
func (m *Memory) resolve(ctx context.Context, session string, ids []string) ([]uint64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	found := map[string]uint64{}
	errFound := errors.New("found")
	err := m.ledger.Events(ctx, session, client.Range{}, func(ev events.Stored) error {
		if slices.Contains(ids, ev.ID) {
			found[ev.ID] = ev.Seq
		}
		if len(found) == len(ids) {
			return errFound
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFound) {
		return nil, fmt.Errorf("session %s: %w", session, err)
	}
	seqs := make([]uint64, len(ids))
	for i, id := range ids {
		seq, ok := found[id]
		if !ok {
			return nil, memoryapi.Errorf(memoryapi.CodeUnknownEvent, "event %s is not in the log of session %s", id, session)
		}
		seqs[i] = seq
	}
	return seqs, nil
}

// Retract withdraws an item or one version. The session records it first;
// the store follows (retrying the request completes a store that failed).
func (m *Memory) Retract(ctx context.Context, req memoryapi.RetractRequest) (memoryapi.RetractReply, error) {
	if err := validSession(req.Session); err != nil {
		return memoryapi.RetractReply{}, err
	}
	if err := memoryapi.ValidateItemID(req.ItemID); err != nil {
		return memoryapi.RetractReply{}, memoryapi.Errorf(memoryapi.CodeMalformed, "%v", err)
	}
	if strings.TrimSpace(req.By) == "" || strings.TrimSpace(req.Reason) == "" {
		return memoryapi.RetractReply{}, memoryapi.Errorf(memoryapi.CodeMalformed, "a retraction needs who (by) and why (reason)")
	}
	if req.Version < 0 {
		return memoryapi.RetractReply{}, memoryapi.Errorf(memoryapi.CodeMalformed, "version %d: want 0 (every version) or a version from 1", req.Version)
	}
	if req.RequestID == "" {
		req.RequestID = events.NewID()
	}
	tenant, err := m.admitSession(ctx, req.Session)
	if err != nil {
		return memoryapi.RetractReply{}, err
	}
	// Items never disappear, never change tenant, and versions only grow:
	// checked once, before the session records the retraction, this stays
	// true.
	last, _, err := m.backend.Last(ctx, req.ItemID)
	if err != nil {
		return memoryapi.RetractReply{}, memoryapi.Errorf(memoryapi.CodeUnavailable, "%v", err)
	}
	if last == nil || events.TenantOrDefault(last.Tenant) != tenant {
		return memoryapi.RetractReply{}, itemNotFound(req.ItemID)
	}
	if req.Version > last.Versions {
		return memoryapi.RetractReply{}, memoryapi.Errorf(memoryapi.CodeVersionNotFound, "memory item %q has no version %d", req.ItemID, req.Version)
	}
	eventID := events.DerivedID("memory.retracted", req.RequestID)
	ack, err := m.ledger.Emit(ctx, req.Session, &events.MemoryRetracted{ItemID: req.ItemID, Version: req.Version, By: req.By, Reason: req.Reason},
		append(onBehalf(ctx), events.WithID(eventID))...)
	if err != nil {
		return memoryapi.RetractReply{}, fmt.Errorf("record the retraction of %s in session %s: %w", req.ItemID, req.Session, err)
	}
	rec, err := m.append(ctx, memoryapi.Record{
		ItemID: req.ItemID, Op: memoryapi.OpRetract, Version: req.Version, By: req.By, Reason: req.Reason,
		Tenant: tenant, Actor: asker(ctx).String(),
		Session: req.Session, EventID: eventID, RequestID: req.RequestID, Time: m.now().UTC(),
	}, true)
	if err != nil {
		return memoryapi.RetractReply{}, err
	}
	return memoryapi.RetractReply{Record: rec, Ack: ack}, nil
}

// syncItems waits until the view holds every record stored before the call.
func (m *Memory) syncItems(ctx context.Context) error {
	head, err := m.backend.Head(ctx)
	if err != nil {
		return memoryapi.Errorf(memoryapi.CodeUnavailable, "%v", err)
	}
	if err := m.items.Wait(ctx, head); err != nil {
		return memoryapi.Errorf(memoryapi.CodeUnavailable, "memory index behind the store: %v", err)
	}
	return nil
}

func validateQuery(query string, f memoryapi.Filter, k int) (int, error) {
	if strings.TrimSpace(query) == "" {
		return 0, memoryapi.Errorf(memoryapi.CodeMalformed, "query is empty")
	}
	for _, s := range f.Scopes {
		if _, _, err := memoryapi.ParseScope(s); err != nil {
			return 0, memoryapi.Errorf(memoryapi.CodeInvalidScope, "%v", err)
		}
	}
	if err := memoryapi.ValidateTags(f.Tags); err != nil {
		return 0, memoryapi.Errorf(memoryapi.CodeMalformed, "%v", err)
	}
	switch {
	case k < 0 || k > memoryapi.MaxK:
		return 0, memoryapi.Errorf(memoryapi.CodeMalformed, "k %d: want 1..%d (0: %d)", k, memoryapi.MaxK, memoryapi.DefaultK)
	case k == 0:
		k = memoryapi.DefaultK
	}
	return k, nil
}

func hits(rs []Result) []memoryapi.Hit {
	out := make([]memoryapi.Hit, len(rs))
	for i, r := range rs {
		out[i] = memoryapi.Hit{ItemID: r.ItemID, Version: r.Version, Score: r.Score, Content: r.Content, Tags: r.Tags, Scope: r.Scope}
	}
	return out
}

// Search ranks items without recording anything: the asker's tenant's, or
// for a service every tenant's.
func (m *Memory) Search(ctx context.Context, req memoryapi.SearchRequest) (memoryapi.RecallReply, error) {
	k, err := validateQuery(req.Query, req.Filter, req.K)
	if err != nil {
		return memoryapi.RecallReply{}, err
	}
	if err := m.syncItems(ctx); err != nil {
		return memoryapi.RecallReply{}, err
	}
	return memoryapi.RecallReply{Hits: hits(m.items.Search(req.Query, req.Filter, askerTenant(ctx), k))}, nil
}

// Recall ranks the items of the session's tenant and records the answer in
// the session, on behalf of whoever asked: the recall is answered only once
// the session holds it.
func (m *Memory) Recall(ctx context.Context, req memoryapi.RecallRequest) (memoryapi.RecallReply, error) {
	if err := validSession(req.Session); err != nil {
		return memoryapi.RecallReply{}, err
	}
	k, err := validateQuery(req.Query, req.Filter, req.K)
	if err != nil {
		return memoryapi.RecallReply{}, err
	}
	if req.RequestID == "" {
		req.RequestID = events.NewID()
	}
	tenant, err := m.admitSession(ctx, req.Session)
	if err != nil {
		return memoryapi.RecallReply{}, err
	}
	if err := m.syncItems(ctx); err != nil {
		return memoryapi.RecallReply{}, err
	}
	hs := hits(m.items.Search(req.Query, req.Filter, tenant, k))
	refs := recalledRefs(hs)
	ack, err := m.ledger.Emit(ctx, req.Session, &events.MemoryRecalled{
		Query: req.Query, Agent: req.Agent, TurnID: req.TurnID, Scopes: req.Scopes, Tags: req.Tags, Items: refs,
	}, append(onBehalf(ctx), events.WithID(events.DerivedID("memory.recalled", req.RequestID)))...)
	if err != nil {
		return memoryapi.RecallReply{}, fmt.Errorf("record the recall in session %s: %w", req.Session, err)
	}
	return memoryapi.RecallReply{Hits: hs, Ack: &ack}, nil
}

// recalledContent bounds the content a recall event carries in all, far
// below the ledger's event size limit (k items of up to MaxContent each
// could exceed it).
const recalledContent = 256 << 10

// recalledRefs names the hits in a recall event with their content, so the
// session's log alone says what the turn was given. Past recalledContent
// bytes in all, a content is cut and says so.
func recalledRefs(hs []memoryapi.Hit) []events.MemoryItemRef {
	refs := make([]events.MemoryItemRef, len(hs))
	left := recalledContent
	for i, h := range hs {
		content := h.Content
		if len(content) > left {
			content = strings.ToValidUTF8(content[:max(left, 0)], "") + fmt.Sprintf(" … [cut: %d bytes in all; rath memory show %s]", len(h.Content), h.ItemID)
		}
		left -= len(h.Content)
		refs[i] = events.MemoryItemRef{ItemID: h.ItemID, Version: h.Version, Score: h.Score, Content: content}
	}
	return refs
}

// Show returns an item as recall sees it.
func (m *Memory) Show(ctx context.Context, req memoryapi.ItemRequest) (memoryapi.Item, error) {
	if err := m.syncItems(ctx); err != nil {
		return memoryapi.Item{}, err
	}
	it, _, err := m.visibleItem(askerTenant(ctx), req.ItemID)
	if err != nil {
		return memoryapi.Item{}, err
	}
	return it, nil
}

// History returns every record of an item.
func (m *Memory) History(ctx context.Context, req memoryapi.ItemRequest) (memoryapi.HistoryReply, error) {
	if err := m.syncItems(ctx); err != nil {
		return memoryapi.HistoryReply{}, err
	}
	_, recs, err := m.visibleItem(askerTenant(ctx), req.ItemID)
	if err != nil {
		return memoryapi.HistoryReply{}, err
	}
	return memoryapi.HistoryReply{ItemID: req.ItemID, Records: recs}, nil
}
