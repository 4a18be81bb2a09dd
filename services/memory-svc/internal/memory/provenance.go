package memory

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/memoryapi"
	"github.com/openrath/rath/pkg/session"
)

// syncAll waits until the view holds every record and every session event
// stored before the call.
func (m *Memory) syncAll(ctx context.Context) error {
	if err := m.syncItems(ctx); err != nil {
		return err
	}
	if err := m.sessions.Sync(ctx); err != nil {
		return memoryapi.Errorf(memoryapi.CodeUnavailable, "%v", err)
	}
	return nil
}

// Readers answers which sessions read an item. "Session S read item X"
// means: S's logical log holds a rath.memory.recalled event naming X —
// stored in S itself, in a fork ancestor of S at or before the fork point
// (a fork's log is its parent's up to there), or taken into S (or into an
// ancestor before the fork point) by a merge. The recall events are found
// in the sessions stream; each session that may hold one (the forks and
// merge targets reachable from where it is stored) is then decided by the
// ledger's fold of that session: the state's coverage, which is what the
// ledger itself uses to never apply a merged event twice. A tenant's
// principal asks about its tenant's items only, and is told about its
// tenant's sessions only.
func (m *Memory) Readers(ctx context.Context, req memoryapi.ItemRequest) (memoryapi.ReadersReply, error) {
	if err := memoryapi.ValidateItemID(req.ItemID); err != nil {
		return memoryapi.ReadersReply{}, memoryapi.Errorf(memoryapi.CodeMalformed, "%v", err)
	}
	if err := m.syncAll(ctx); err != nil {
		return memoryapi.ReadersReply{}, err
	}
	tenant := askerTenant(ctx)
	if _, _, err := m.visibleItem(tenant, req.ItemID); err != nil {
		return memoryapi.ReadersReply{}, err
	}
	// Recall serves a session its own tenant's items only, so the readers
	// of an item are its tenant's sessions; a merge a service made across
	// tenants could still carry a recall event into another tenant's
	// session, which a tenant's principal is not told about.
	tenants := map[string]string{}
	ours := func(id string) (bool, error) {
		if tenant == anyTenant {
			return true, nil
		}
		t, ok := tenants[id]
		if !ok {
			var err error
			if t, err = m.sessionTenant(ctx, id); err != nil {
				return false, err
			}
			tenants[id] = t
		}
		return t == tenant, nil
	}
	states := map[string]*session.State{}
	state := func(id string) (*session.State, error) {
		if st, ok := states[id]; ok {
			return st, nil
		}
		st, err := m.state(ctx, id, 0)
		if err != nil {
			return nil, err
		}
		states[id] = st
		return st, nil
	}
	out := memoryapi.ReadersReply{ItemID: req.ItemID, Readers: []memoryapi.Reader{}}
	for _, r := range m.sessions.recallsOf(req.ItemID) {
		reader := memoryapi.Reader{StoredIn: r.session, Seq: r.seq, EventID: r.eventID, Query: r.query, Agent: r.agent, TurnID: r.turnID}
		if i := slices.IndexFunc(r.items, func(it events.MemoryItemRef) bool { return it.ItemID == req.ItemID }); i >= 0 {
			reader.Version, reader.Score = r.items[i].Version, r.items[i].Score
		}
		own := reader
		own.Session, own.Via = r.session, memoryapi.ViaOwn
		if ok, err := ours(r.session); err != nil {
			return memoryapi.ReadersReply{}, fmt.Errorf("tenant of %s: %w", r.session, err)
		} else if ok {
			out.Readers = append(out.Readers, own)
		}
		for _, c := range m.sessions.reach(r.session) {
			if ok, err := ours(c); err != nil {
				return memoryapi.ReadersReply{}, fmt.Errorf("tenant of %s: %w", c, err)
			} else if !ok {
				continue
			}
			st, err := state(c)
			if err != nil {
				return memoryapi.ReadersReply{}, fmt.Errorf("state of %s: %w", c, err)
			}
			via := ""
			switch st.Coverage(r.session, r.seq) {
			case session.CoveredByPath:
				via = memoryapi.ViaFork
			case session.CoveredByMerge:
				via = memoryapi.ViaMerge
			default:
				continue
			}
			inherited := reader
			inherited.Session, inherited.Via = c, via
			out.Readers = append(out.Readers, inherited)
		}
	}
	slices.SortFunc(out.Readers, func(a, b memoryapi.Reader) int {
		if c := strings.Compare(a.Session, b.Session); c != 0 {
			return c
		}
		if c := strings.Compare(a.StoredIn, b.StoredIn); c != 0 {
			return c
		}
		return int(a.Seq) - int(b.Seq)
	})
	return out, nil
}

// Justify answers what justified an item's versions: each version's
// provenance, with the events it names read back from the ledger's log of
// the provenance session (by the sequences resolved when it was written).
func (m *Memory) Justify(ctx context.Context, req memoryapi.JustifyRequest) (memoryapi.JustifyReply, error) {
	if err := memoryapi.ValidateItemID(req.ItemID); err != nil {
		return memoryapi.JustifyReply{}, memoryapi.Errorf(memoryapi.CodeMalformed, "%v", err)
	}
	if err := m.syncItems(ctx); err != nil {
		return memoryapi.JustifyReply{}, err
	}
	it, recs, err := m.visibleItem(askerTenant(ctx), req.ItemID)
	if err != nil {
		return memoryapi.JustifyReply{}, err
	}
	if req.Version < 0 || req.Version > it.Versions {
		return memoryapi.JustifyReply{}, memoryapi.Errorf(memoryapi.CodeVersionNotFound, "memory item %q has no version %d", req.ItemID, req.Version)
	}
	out := memoryapi.JustifyReply{ItemID: req.ItemID, Versions: []memoryapi.Justification{}}
	for _, r := range recs {
		if r.Op != memoryapi.OpWrite || (req.Version != 0 && r.Version != req.Version) || r.Provenance == nil {
			continue
		}
		j := memoryapi.Justification{
			Version: r.Version, RestoredFrom: r.RestoredFrom, Retracted: slices.Contains(it.Retracted, r.Version),
			Provenance: *r.Provenance, Evidence: []json.RawMessage{},
			WrittenIn: memoryapi.EventRef{Session: r.Session, EventID: r.EventID},
		}
		for i, seq := range r.EventSeqs {
			evs, err := m.ledger.LogRaw(ctx, r.Provenance.Session, client.Range{From: seq, To: seq})
			if err != nil {
				return memoryapi.JustifyReply{}, fmt.Errorf("evidence of %s version %d: %w", req.ItemID, r.Version, err)
			}
			if len(evs) == 1 && i < len(r.Provenance.EventIDs) && eventID(evs[0]) == r.Provenance.EventIDs[i] {
				j.Evidence = append(j.Evidence, evs[0])
			}
		}
		out.Versions = append(out.Versions, j)
	}
	return out, nil
}

func eventID(raw json.RawMessage) string {
	var h struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(raw, &h)
	return h.ID
}

// Present answers which items were present in a session at a sequence and
// why: the ledger folds the session up to the sequence (through its fork
// ancestry and the merges it took in, in log order), and its memory events
// say which items it wrote or recalled; a retraction in that log removes
// the item (or the version) from then on. A retraction elsewhere does not
// change what the session held; RetractedNow reports it. A session of
// another tenant does not exist for a tenant's principal.
func (m *Memory) Present(ctx context.Context, req memoryapi.PresentRequest) (memoryapi.PresentReply, error) {
	if err := validSession(req.Session); err != nil {
		return memoryapi.PresentReply{}, err
	}
	if _, err := m.admitSession(ctx, req.Session); err != nil {
		return memoryapi.PresentReply{}, err
	}
	st, err := m.state(ctx, req.Session, req.At)
	if err != nil {
		return memoryapi.PresentReply{}, fmt.Errorf("state of %s at %d: %w", req.Session, req.At, err)
	}
	if err := m.syncAll(ctx); err != nil {
		return memoryapi.PresentReply{}, err
	}
	present := map[string]*memoryapi.Presence{}
	add := func(itemID string, c memoryapi.Cause) {
		p := present[itemID]
		if p == nil {
			p = &memoryapi.Presence{ItemID: itemID}
			present[itemID] = p
		}
		p.Because = append(p.Because, c)
	}
	for _, me := range st.Memory {
		switch me.Kind {
		case "written":
			rec, ok := m.items.ByEvent(me.EventID)
			if !ok {
				for _, id := range me.ItemIDs { // written without this service
					add(id, memoryapi.Cause{Kind: me.Kind, Seq: me.Seq, EventID: me.EventID})
				}
				continue
			}
			c := memoryapi.Cause{Kind: me.Kind, Seq: me.Seq, EventID: me.EventID, Version: rec.version}
			if v, ok := m.items.Record(rec.itemID, rec.version); ok && v.Provenance != nil {
				c.Evidence = v.Provenance.Evidence
			}
			add(rec.itemID, c)
		case "recalled":
			r, ok := m.sessions.recallByID(me.EventID)
			if !ok {
				for _, id := range me.ItemIDs {
					add(id, memoryapi.Cause{Kind: me.Kind, Seq: me.Seq, EventID: me.EventID})
				}
				continue
			}
			for _, it := range r.items {
				add(it.ItemID, memoryapi.Cause{Kind: me.Kind, Seq: me.Seq, EventID: me.EventID, Version: it.Version})
			}
		case "retracted":
			version := 0
			if rec, ok := m.items.ByEvent(me.EventID); ok {
				version = rec.version
			}
			for _, id := range me.ItemIDs {
				p := present[id]
				if p == nil {
					continue
				}
				if version == 0 {
					delete(present, id)
					continue
				}
				p.Because = slices.DeleteFunc(p.Because, func(c memoryapi.Cause) bool { return c.Version == version })
				if len(p.Because) == 0 {
					delete(present, id)
				}
			}
		}
	}
	out := memoryapi.PresentReply{Session: req.Session, At: st.Seq, Items: []memoryapi.Presence{}}
	for _, p := range present {
		for _, c := range p.Because {
			if c.Version > 0 && !slices.Contains(p.Versions, c.Version) {
				p.Versions = append(p.Versions, c.Version)
			}
		}
		slices.Sort(p.Versions)
		if it, _, ok := m.items.Get(p.ItemID); ok && it.Current == nil {
			p.RetractedNow = true
		}
		out.Items = append(out.Items, *p)
	}
	slices.SortFunc(out.Items, func(a, b memoryapi.Presence) int { return strings.Compare(a.ItemID, b.ItemID) })
	return out, nil
}
