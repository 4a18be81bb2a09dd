package console

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/openrath/rath/internal/dossier"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/memoryapi"
	"github.com/openrath/rath/pkg/session"
)

// maxRows is how many sessions the list shows at once; a filter narrows
// the rest.
const maxRows = 500

type sessionsPage struct {
	Frame
	Rows          []listRow
	Matched       int
	Status, Query string
	Statuses      []string
}

// listRow is a listed session as the list shows it: its branch name in its
// tree (and its parent's), its status or outcome as a badge, what it waits
// for, and its task's first line as plain text.
type listRow struct {
	api.Session
	Name       string `json:"name,omitempty"`
	ParentName string `json:"parent_name,omitempty"`
	Badge      badge  `json:"badge"`
	Waits      string `json:"waits,omitempty"`
	TaskLine   string `json:"task_line,omitempty"`
}

// waitsPerList bounds the active sessions a list asks the ledger about (an
// overview each, bounded too) to say what they wait for.
const waitsPerList = 24

// listSessions is the sessions the filters select, the most recently
// active first, at most maxRows of them: one page from the ledger's
// catalog, however many sessions there are.
func (s *Server) listSessions(r *http.Request) (sessionsPage, error) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	p := sessionsPage{Status: r.URL.Query().Get("status"), Query: strings.TrimSpace(r.URL.Query().Get("q")),
		Statuses: []string{"", "active", "paused", "closed", "archived"}}
	c := s.client(r)
	page, err := c.ListPage(ctx, api.ListRequest{Status: p.Status, Match: p.Query, Order: "active", Limit: maxRows})
	if err != nil {
		return p, err
	}
	p.Matched = page.Total
	now := s.now()
	// The rows come most recently active first; the active sessions asked
	// about are the quietest, those most likely stalled.
	var ask []int
	for i, ss := range page.Sessions {
		if ss.Status == string(session.StatusActive) {
			ask = append(ask, i)
		}
	}
	slices.Reverse(ask)
	waits := make(map[int]*wait)
	for _, i := range ask[:min(len(ask), waitsPerList)] {
		id := page.Sessions[i].ID
		if v, err := c.Overview(ctx, api.StateRequest{Session: id, Tail: 1, Clip: 1}); err == nil {
			waits[i] = waitOf(v, now)
		} else {
			s.log.Warn("console: what a session waits for", "session", id, "err", err)
		}
	}
	for i, ss := range page.Sessions {
		row := listRow{Session: ss, TaskLine: plainLine(ss.Task, 160)}
		row.Badge, row.Waits = badgeOf(ss.Status, ss.Outcome, "", waits[i]), waitText(waits[i], now)
		p.Rows = append(p.Rows, row)
	}
	s.listNames(ctx, c, p.Rows)
	return p, nil
}

func (s *Server) sessions(w http.ResponseWriter, r *http.Request) {
	p, err := s.listSessions(r)
	if err != nil {
		s.fail(w, r, "list sessions", err)
		return
	}
	s.render(w, r, "sessions.html", "Sessions", &p)
}

func (s *Server) sessionsJSON(w http.ResponseWriter, r *http.Request) {
	p, err := s.listSessions(r)
	if err != nil {
		s.fail(w, r, "list sessions", err)
		return
	}
	writeJSON(w, p)
}

type sessionPage struct {
	Frame
	State   *session.Overview
	Pending []client.PendingApproval
	Tokens  session.Tokens
	// Name is the session's branch name in its tree (root, fork-1@22), as
	// the dossier and the demo call it, ParentName its parent's; empty for
	// a session alone.
	Name, ParentName string
	Badge            badge
	// Waits says what an active session waits for, and for how long;
	// Reason why it was closed, the sessions it names by their names.
	Waits, Reason string
	// Tree is every other session of its tree, to compare with.
	Tree []branchOption
}

// branchOption is a session of the tree in the compare form: its ID and
// how it reads.
type branchOption struct{ ID, Label string }

func (s *Server) session(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := validID(id); err != nil {
		s.fail(w, r, "session", err)
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	// The bounded view the ledger answers: the same at any length (the
	// whole state is folded from the log, in proportion to it).
	st, err := s.client(r).Overview(ctx, api.StateRequest{Session: id, Tail: 1, Clip: 1})
	if err != nil {
		s.fail(w, r, "session "+id, err)
		return
	}
	p := sessionPage{State: st, Tokens: st.Usage.Total}
	if p.Pending, err = s.client(r).Pending(ctx, id); err != nil {
		s.log.Warn("console: pending approvals", "session", id, "err", err)
	}
	now := s.now()
	names, own, err := treeNames(ctx, s.client(r), id)
	if err != nil {
		s.log.Warn("console: branch names", "session", id, "err", err)
	}
	wt := waitOf(st, now)
	p.Reason = dossier.ReplaceIDs(st.CloseReason, names)
	p.Badge, p.Waits = badgeOf(string(st.Status), st.Outcome, p.Reason, wt), waitText(wt, now)
	title := st.ID
	if len(own) > 1 {
		p.Name, p.ParentName = names[id], names[st.Lineage.Parent]
		title = p.Name + " · " + st.ID
		for _, o := range own {
			if o != id {
				p.Tree = append(p.Tree, branchOption{ID: o, Label: dossier.Labelled(names, o)})
			}
		}
	}
	s.render(w, r, "session.html", title, &p)
}

// verifyJSON is the ledger's verification of the session (rath verify):
// the page asks for it after it opened, as it takes time in proportion to
// the session's length.
func (s *Server) verifyJSON(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := validID(id); err != nil {
		s.fail(w, r, "verify", err)
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	rep, err := s.client(r).Verify(ctx, id)
	if err != nil {
		s.fail(w, r, "verify "+id, err)
		return
	}
	writeJSON(w, rep)
}

// graph is the lineage graph of a session's tree, as the dossier draws it
// (an SVG document with forks, merges and memory edges).
func (s *Server) graph(w http.ResponseWriter, r *http.Request) {
	d, ok := s.dossier(w, r, false) // the graph reads no blob
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	_, _ = w.Write([]byte(dossier.Graph(d)))
}

func (s *Server) dossierMarkdown(w http.ResponseWriter, r *http.Request) {
	d, ok := s.dossier(w, r, true)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "text/markdown; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", d.Session+"-dossier.md"))
	_, _ = w.Write([]byte(dossier.Markdown(d)))
}

// dossier builds the dossier of the request's session, with the blobs its
// events refer to when withBlobs.
func (s *Server) dossier(w http.ResponseWriter, r *http.Request, withBlobs bool) (*dossier.Dossier, bool) {
	id := r.PathValue("id")
	if err := validID(id); err != nil {
		s.fail(w, r, "dossier", err)
		return nil, false
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	opts := dossier.Options{Log: s.log}
	if withBlobs {
		opts.Blobs = s.client(r).GetBlob
	}
	d, err := dossier.Build(ctx, s.client(r), id, opts)
	if err != nil {
		s.fail(w, r, "dossier of "+id, err)
		return nil, false
	}
	return d, true
}

// row is one event of the timeline.
type row struct {
	Seq     uint64    `json:"seq"`
	Session string    `json:"session"` // an ancestor's, for events before a fork
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Actor   string    `json:"actor,omitempty"`
	Summary string    `json:"summary"`
	// Diff is set on a tool call that changed files.
	Diff bool `json:"diff,omitempty"`
}

// toRow is an event as the timeline shows it; the long session IDs its
// summary names (a fork a close continued on, a merge's source) by their
// branch names (names, from named).
func toRow(ev events.Stored, names map[string]string) row {
	r := row{Seq: ev.Seq, Session: ev.Session, Time: ev.Time, Type: ev.Type, Actor: ev.Actor, Summary: dossier.ReplaceIDs(events.Summary(ev), names)}
	if ev.Type == events.TypeToolCompleted {
		if d, err := ev.Decode(); err == nil {
			done := d.(*events.ToolCompleted)
			r.Diff = done.Diff != "" || done.DiffRef != ""
		}
	}
	return r
}

// pageSize is how many events a timeline page holds.
const pageSize = 200

// eventsJSON is a page of the timeline: the events from ?from (default: the
// last page's first), at most ?limit, and the head.
func (s *Server) eventsJSON(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := validID(id); err != nil {
		s.fail(w, r, "events", err)
		return
	}
	q := r.URL.Query()
	limit, err := intParam(q.Get("limit"), pageSize)
	if err != nil || limit <= 0 || limit > 1000 {
		s.fail(w, r, "events", fmt.Errorf("%w: limit must be 1–1000", errBadRequest))
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	st, err := s.client(r).Overview(ctx, api.StateRequest{Session: id, Tail: 1, Clip: 1})
	if err != nil {
		s.fail(w, r, "events of "+id, err)
		return
	}
	from := uint64(1)
	if st.Seq > uint64(limit) {
		from = st.Seq - uint64(limit) + 1
	}
	if v := q.Get("from"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			s.fail(w, r, "events", fmt.Errorf("%w: from must be a sequence ≥ 1", errBadRequest))
			return
		}
		from = n
	}
	out := struct {
		Head   uint64 `json:"head"`
		Events []row  `json:"events"`
	}{Head: st.Seq, Events: []row{}}
	if from <= st.Seq {
		evs, err := s.client(r).Log(ctx, id, client.Range{From: from, To: st.Seq, Limit: limit})
		if err != nil {
			s.fail(w, r, "events of "+id, err)
			return
		}
		names := s.named(ctx, s.client(r), id)
		for _, ev := range evs {
			out.Events = append(out.Events, toRow(ev, names))
		}
	}
	writeJSON(w, out)
}

// eventJSON is one event as stored, with its data decoded.
func (s *Server) eventJSON(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err == nil {
		err = validID(id)
	}
	if err != nil || seq == 0 {
		s.fail(w, r, "event", fmt.Errorf("%w: want /api/s/SESSION/event/SEQ", errBadRequest))
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	raws, err := s.client(r).LogRaw(ctx, id, client.Range{From: seq, To: seq})
	if err != nil {
		s.fail(w, r, fmt.Sprintf("event %d of %s", seq, id), err)
		return
	}
	if len(raws) == 0 {
		s.fail(w, r, fmt.Sprintf("event %d of %s", seq, id), api.ErrOutOfRange)
		return
	}
	ev, err := events.ParseStored(raws[0])
	if err != nil {
		s.fail(w, r, fmt.Sprintf("event %d of %s", seq, id), err)
		return
	}
	out := struct {
		Row      row             `json:"row"`
		Event    json.RawMessage `json:"event"`
		Facts    []fact          `json:"facts,omitempty"`
		Diff     string          `json:"diff,omitempty"`
		Recalled []recalledItem  `json:"recalled,omitempty"`
	}{Row: toRow(ev, s.named(ctx, s.client(r), id)), Event: raws[0]}
	if data, err := ev.Decode(); err == nil {
		out.Facts = eventFacts(ctx, s.client(r), ev, data)
		switch d := data.(type) {
		case *events.ToolCompleted:
			out.Diff = d.Diff
			if out.Diff == "" && d.DiffRef != "" {
				if b, err := s.client(r).GetBlob(ctx, d.DiffRef); err == nil {
					out.Diff = string(b)
				}
			}
		case *events.MemoryRecalled:
			out.Recalled = s.provenance(ctx, s.client(r), d.Items)
		}
	}
	writeJSON(w, out)
}

// recalledItem is a recalled memory version with where it was written: the
// session and the events that justified it, to link to.
type recalledItem struct {
	ItemID   string   `json:"item_id"`
	Version  int      `json:"version"`
	Content  string   `json:"content,omitempty"`
	Session  string   `json:"session,omitempty"`
	Seqs     []uint64 `json:"seqs,omitempty"`
	Evidence string   `json:"evidence,omitempty"`
	// Missing says why the writer is not shown (the memory service did not
	// answer, or no longer holds the version).
	Missing string `json:"missing,omitempty"`
}

// provenance asks the memory service where each recalled version was
// written.
func (s *Server) provenance(ctx context.Context, c *client.Client, items []events.MemoryItemRef) []recalledItem {
	out := make([]recalledItem, 0, len(items))
	for _, it := range items {
		ri := recalledItem{ItemID: it.ItemID, Version: it.Version, Content: it.Content}
		h, err := c.Memory().History(ctx, it.ItemID)
		if err != nil {
			ri.Missing = err.Error()
			out = append(out, ri)
			continue
		}
		ri.Missing = "the memory service holds no such version"
		for _, rec := range h.Records {
			if rec.Op == memoryapi.OpWrite && rec.Version == it.Version && rec.Provenance != nil {
				ri.Session, ri.Seqs, ri.Evidence, ri.Missing = rec.Provenance.Session, rec.EventSeqs, rec.Provenance.Evidence, ""
				break
			}
		}
		out = append(out, ri)
	}
	return out
}

// stateJSON is the folded state at ?at (default: the head).
func (s *Server) stateJSON(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := validID(id); err != nil {
		s.fail(w, r, "state", err)
		return
	}
	at, err := intParam(r.URL.Query().Get("at"), 0)
	if err != nil || at < 0 {
		s.fail(w, r, "state", fmt.Errorf("%w: at must be a sequence", errBadRequest))
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	// The ledger's bounded view at that sequence: the same size at any
	// length, the transcript's last entries and the counts of the rest.
	st, err := s.client(r).Overview(ctx, api.StateRequest{Session: id, At: uint64(at)})
	if err != nil {
		s.fail(w, r, "state of "+id, err)
		return
	}
	writeJSON(w, st)
}

type approvalsPage struct {
	Frame
	Pending []client.PendingApproval
	Errors  []string
}

// approvals lists every open session's pending approvals.
func (s *Server) approvals(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	all, err := s.client(r).List(ctx, api.ListRequest{})
	if err != nil {
		s.fail(w, r, "list sessions", err)
		return
	}
	var p approvalsPage
	for _, ss := range all {
		if session.Status(ss.Status).Ended() {
			continue
		}
		pend, err := s.client(r).Pending(ctx, ss.ID)
		if err != nil {
			p.Errors = append(p.Errors, fmt.Sprintf("%s: %v", ss.ID, err))
			continue
		}
		p.Pending = append(p.Pending, pend...)
	}
	slices.SortFunc(p.Pending, func(a, b client.PendingApproval) int {
		return cmp.Or(strings.Compare(a.Session, b.Session), cmp.Compare(a.Seq, b.Seq))
	})
	s.render(w, r, "approvals.html", "Approvals", &p)
}

// decide grants or rejects an approval, as the console's identity, and
// returns to the page the form was on.
func (s *Server) decide(w http.ResponseWriter, r *http.Request) {
	id, approval, decision := r.PathValue("id"), r.PathValue("approval"), r.PathValue("decision")
	if err := validID(id); err != nil {
		s.fail(w, r, "decide", err)
		return
	}
	reason := strings.TrimSpace(r.FormValue("reason"))
	ctx, cancel := s.ctx(r)
	defer cancel()
	var err error
	switch decision {
	case "approve":
		_, err = s.client(r).Approve(ctx, id, approval, reason)
	case "reject":
		if reason == "" {
			err = fmt.Errorf("%w: a rejection needs a reason", errBadRequest)
			break
		}
		_, err = s.client(r).Reject(ctx, id, approval, reason)
	default:
		err = fmt.Errorf("%w: the decision is approve or reject, not %q", errBadRequest, decision)
	}
	if err != nil {
		s.fail(w, r, fmt.Sprintf("%s %s of %s", decision, approval, id), err)
		return
	}
	// Back to the session's page when the form was there.
	back := "/approvals"
	if ref, err := url.Parse(r.Referer()); err == nil && ref.Path == "/s/"+id {
		back = ref.Path
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}

func intParam(v string, def int) (int, error) {
	if v == "" {
		return def, nil
	}
	return strconv.Atoi(v)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	_ = enc.Encode(v)
}
