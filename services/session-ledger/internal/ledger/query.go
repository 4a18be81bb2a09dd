package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	api "github.com/openrath/rath/pkg/ledgerapi"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/session"
)

// State returns the state of a session at sequence at (0: its head).
func (l *Ledger) State(ctx context.Context, id string, at uint64) (*session.State, error) {
	head, err := l.head(ctx, id)
	if err != nil {
		return nil, err
	}
	if at == 0 || at == head.Seq {
		return head, nil
	}
	if at > head.Seq {
		return nil, api.Errorf(api.CodeOutOfRange, "session %s has no sequence %d (head %d)", id, at, head.Seq)
	}
	st, _, err := l.stateAt(ctx, id, at)
	return st, err
}

// Overview returns the bounded view of a session at sequence at (0: its
// head), what the state operation answers. At the head it is built from
// the state the ledger holds, under the session's lock and without copying
// the state: its cost is the session's tool calls and chunk count, not its
// transcript. Earlier sequences are folded from the nearest snapshot.
func (l *Ledger) Overview(ctx context.Context, id string, at uint64, o session.OverviewOptions) (*session.Overview, error) {
	if err := events.ValidateSessionID(id); err != nil {
		return nil, api.Errorf(api.CodeInvalidSession, "%v", err)
	}
	e := l.entry(id)
	e.mu.Lock()
	if err := l.current(ctx, e); err != nil {
		e.mu.Unlock()
		return nil, err
	}
	head := e.state.Seq
	if at == 0 || at == head {
		v := e.state.Overview(o)
		e.mu.Unlock()
		return v, nil
	}
	e.mu.Unlock()
	if at > head {
		return nil, api.Errorf(api.CodeOutOfRange, "session %s has no sequence %d (head %d)", id, at, head)
	}
	st, _, err := l.stateAt(ctx, id, at)
	if err != nil {
		return nil, err
	}
	return st.Overview(o), nil
}

// WholeState returns part part of the JSON of a session's whole state at
// sequence at (0: its head): the state operation's answer to a request for
// the whole state. It refuses what Overview refuses. At the head it is
// marshalled from the state the ledger holds, under the session's lock;
// earlier sequences are folded from the nearest snapshot. A state of
// several parts is kept (the last one only) for the parts asked next.
func (l *Ledger) WholeState(ctx context.Context, id string, at uint64, part int) (api.StatePart, error) {
	if err := events.ValidateSessionID(id); err != nil {
		return api.StatePart{}, api.Errorf(api.CodeInvalidSession, "%v", err)
	}
	if part < 0 || part > 0 && at == 0 {
		return api.StatePart{}, api.Errorf(api.CodeMalformed, "part %d at %d: parts count from 0, and each after the first is asked at the seq the first answered", part, at)
	}
	e := l.entry(id)
	e.mu.Lock()
	if err := l.current(ctx, e); err != nil {
		e.mu.Unlock()
		return api.StatePart{}, err
	}
	head := e.state.Seq
	var w *wholeState
	var err error
	if at == 0 || at == head {
		at = head
		w, err = l.wholeAt(id, at, func() (*session.State, error) { return e.state, nil })
	}
	e.mu.Unlock()
	if at > head {
		return api.StatePart{}, api.Errorf(api.CodeOutOfRange, "session %s has no sequence %d (head %d)", id, at, head)
	}
	if w == nil && err == nil {
		w, err = l.wholeAt(id, at, func() (*session.State, error) {
			st, _, err := l.stateAt(ctx, id, at)
			return st, err
		})
	}
	if err != nil {
		return api.StatePart{}, err
	}
	size := int(l.replyBudget()) / 4 * 3 // base64 makes it the budget
	parts := max(1, (len(w.body)+size-1)/size)
	if part >= parts {
		return api.StatePart{}, api.Errorf(api.CodeOutOfRange, "the state of %s at %d has %d parts, no part %d", id, at, parts, part)
	}
	return api.StatePart{Seq: at, Part: part, Parts: parts, Sum: w.sum, Data: w.body[part*size : min(len(w.body), (part+1)*size)]}, nil
}

// replyBudget is the bytes a reply's body may hold: half the server's
// message size.
func (l *Ledger) replyBudget() int64 {
	if l.maxPayload <= 0 {
		return 512 << 10
	}
	return l.maxPayload / 2
}

// wholeState is the JSON of a session's whole state at seq, and its SHA-256.
type wholeState struct {
	id   string
	seq  uint64
	body []byte
	sum  string
}

// wholeAt is the JSON of session id's state at seq, the one kept or the
// one state returns. A state does not change at a seq once stored.
func (l *Ledger) wholeAt(id string, seq uint64, state func() (*session.State, error)) (*wholeState, error) {
	if w := l.whole.Load(); w != nil && w.id == id && w.seq == seq {
		return w, nil
	}
	st, err := state()
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(st)
	if err != nil {
		return nil, unavailable(fmt.Errorf("state of %s at %d: %w", id, seq, err))
	}
	sum := sha256.Sum256(body)
	w := &wholeState{id: id, seq: seq, body: body, sum: hex.EncodeToString(sum[:])}
	if int64(len(body)) > l.replyBudget()/2 {
		l.whole.Store(w)
	}
	return w, nil
}

// Log returns the stored events of a session's logical log with
// from <= seq <= to (to 0: the head), at most limit (0 or above MaxLogPage:
// MaxLogPage) and at most half the server's message size in bytes; more
// reports that the range goes on. Each event is its stored JSON.
func (l *Ledger) Log(ctx context.Context, id string, from, to uint64, limit int) (evs []json.RawMessage, more bool, err error) {
	if err := events.ValidateSessionID(id); err != nil {
		return nil, false, api.Errorf(api.CodeInvalidSession, "%v", err)
	}
	if limit <= 0 || limit > api.MaxLogPage {
		limit = api.MaxLogPage
	}
	budget := l.replyBudget()
	var size int64
	err = l.logicalEvents(ctx, id, from, to, func(ev events.Stored, m eventstore.Msg) error {
		body, err := l.readOut(ctx, ev, m.Body)
		if err != nil {
			return err
		}
		if len(evs) == limit || len(evs) > 0 && size+int64(len(body)) > budget {
			more = true
			return errStop
		}
		evs = append(evs, json.RawMessage(body))
		size += int64(len(body))
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, false, unavailable(err)
	}
	return evs, more, nil
}

// List lists the sessions the asker may read that f selects, a page at a
// time when f.Limit is set. It reads the catalog the ledger keeps in memory
// (eventstore.Catalog), or the index itself while the catalog is not up.
func (l *Ledger) List(ctx context.Context, f api.ListRequest) (api.ListReply, error) {
	p := principalOf(ctx)
	match := strings.ToLower(f.Match)
	keep := func(r eventstore.Record) bool {
		if !p.IsService() && events.TenantOrDefault(r.Tenant) != p.Tenant {
			return false
		}
		if f.Status != "" && r.Status != f.Status {
			return false
		}
		for k, v := range f.Labels {
			if r.Labels[k] != v {
				return false
			}
		}
		return match == "" || matches(r, match)
	}
	if f.Limit < 0 {
		return api.ListReply{}, api.Errorf(api.CodeMalformed, "limit %d: want 0 (all) or more", f.Limit)
	}
	var entries []eventstore.Entry
	var reply api.ListReply
	if cat := l.catalog.Load(); cat != nil && cat.OK() {
		var err error
		entries, reply.Next, reply.Total, err = cat.List(eventstore.Query{
			Keep:  func(e eventstore.Entry) bool { return keep(e.Record) },
			Order: f.Order, After: f.After, Limit: f.Limit,
		})
		if err != nil {
			return api.ListReply{}, api.Errorf(api.CodeMalformed, "%v", err)
		}
	} else {
		recs, err := l.store.Records(ctx)
		if err != nil {
			return api.ListReply{}, unavailable(err)
		}
		forks := map[string]int{}
		for _, r := range recs {
			if r.Parent != "" {
				forks[r.Parent]++
			}
		}
		var all []eventstore.Entry
		for _, r := range recs {
			r.Forks = forks[r.ID]
			if !keep(r) {
				continue
			}
			// The index is written on lifecycle events, the head record at
			// most a second after an append.
			e := eventstore.Entry{Record: r, Active: r.Updated}
			if h, err := l.store.GetHead(ctx, r.ID); err == nil && h.Seq > e.Seq {
				e.Seq = h.Seq
			} else if err != nil && !errors.Is(err, eventstore.ErrNotFound) {
				return api.ListReply{}, unavailable(err)
			}
			all = append(all, e)
		}
		var err2 error
		entries, reply.Next, reply.Total, err2 = eventstore.Page(all, eventstore.Query{Order: f.Order, After: f.After, Limit: f.Limit})
		if err2 != nil {
			return api.ListReply{}, api.Errorf(api.CodeMalformed, "%v", err2)
		}
	}
	reply.Sessions = make([]api.Session, len(entries))
	for i, e := range entries {
		// This ledger knows its own appends at once: the listed sequence
		// is the latest of the index's, the recorded head's and its own.
		if seq, ok := l.heads.pending(e.ID); ok && seq > e.Seq {
			e.Seq = seq
		}
		e.Record.Active = e.Active
		reply.Sessions[i] = e.Record
	}
	return reply, nil
}

// matches reports whether a session's ID, workflow, parent, task (as the
// index keeps it) or a label (key=value) contains q, which is lower case.
func matches(r eventstore.Record, q string) bool {
	for _, f := range []string{r.ID, r.Workflow, r.Parent, r.Task} {
		if strings.Contains(strings.ToLower(f), q) {
			return true
		}
	}
	for k, v := range r.Labels {
		if strings.Contains(strings.ToLower(k+"="+v), q) {
			return true
		}
	}
	return false
}

// Lineage returns the lineage graph around a session.
func (l *Ledger) Lineage(ctx context.Context, id string) (api.Graph, error) {
	segs, err := l.lineageOf(ctx, id)
	if err != nil {
		return api.Graph{}, err
	}
	g := api.Graph{Session: id}
	for _, s := range segs[:len(segs)-1] {
		g.Ancestors = append(g.Ancestors, s.Session)
	}
	g.Root, err = l.node(ctx, segs[0].Session, 0, map[string]bool{})
	return g, err
}

func (l *Ledger) node(ctx context.Context, id string, forkSeq uint64, seen map[string]bool) (*api.Node, error) {
	seen[id] = true
	st, err := l.head(ctx, id)
	if err != nil {
		return nil, err
	}
	n := &api.Node{Session: id, Status: string(st.Status), Outcome: st.Outcome, ForkSeq: forkSeq, Created: st.Created, Head: st.Seq}
	for _, m := range st.Lineage.Merges {
		n.Merges = append(n.Merges, api.Merged{Seq: m.Seq, Source: m.Source, SourceSeq: m.SourceSeq})
	}
	kids, err := l.store.Children(ctx, id)
	if err != nil {
		return nil, unavailable(err)
	}
	for _, k := range kids {
		if seen[k] {
			continue
		}
		segs, err := l.lineageOf(ctx, k)
		if err != nil {
			return nil, err
		}
		c, err := l.node(ctx, k, segs[len(segs)-1].From-1, seen)
		if err != nil {
			return nil, err
		}
		n.Children = append(n.Children, c)
	}
	sort.Slice(n.Children, func(i, j int) bool { return n.Children[i].Session < n.Children[j].Session })
	return n, nil
}
