package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/openrath/rath/internal/dossier"
	"github.com/openrath/rath/internal/replay"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// fork forks the session at the form's sequence (its head when empty),
// appends the form's message to the fork as a user message when there is
// one (the agent loop resumes on it), and opens the fork.
func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := validID(id); err != nil {
		s.fail(w, r, "fork", err)
		return
	}
	var at uint64
	if v := strings.TrimSpace(r.FormValue("at")); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			s.fail(w, r, "fork", fmt.Errorf("%w: at must be a sequence ≥ 1", errBadRequest))
			return
		}
		at = n
	}
	newID := strings.TrimSpace(r.FormValue("id"))
	if newID != "" {
		if err := validID(newID); err != nil {
			s.fail(w, r, "fork", err)
			return
		}
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	ack, err := s.client(r).Fork(ctx, api.ForkRequest{Parent: id, At: at, ID: newID, Reason: strings.TrimSpace(r.FormValue("reason"))})
	if err != nil {
		s.fail(w, r, "fork "+id, err)
		return
	}
	if msg := strings.TrimSpace(r.FormValue("message")); msg != "" {
		// Marked as a person's correction: the selector gives the agent of
		// the last turn its next turn on it (its built-in rule correction),
		// where the fork is between turns; an unmarked message routes
		// nothing but a workflow rule that matches it.
		if _, err := s.client(r).Emit(ctx, ack.Session, &events.ChunkAppended{Role: events.RoleUser, Content: msg, Correction: true},
			events.WithCausation(ack.ID)); err != nil {
			s.fail(w, r, "message to the fork "+ack.Session, err)
			return
		}
	}
	http.Redirect(w, r, "/s/"+url.PathEscape(ack.Session), http.StatusSeeOther)
}

// lifecycle pauses, resumes or closes the session with the form's reason.
func (s *Server) lifecycle(w http.ResponseWriter, r *http.Request) {
	id, action := r.PathValue("id"), r.PathValue("action")
	if err := validID(id); err != nil {
		s.fail(w, r, action, err)
		return
	}
	reason := strings.TrimSpace(r.FormValue("reason"))
	ctx, cancel := s.ctx(r)
	defer cancel()
	var do func(context.Context) error
	switch action {
	case "pause":
		do = func(ctx context.Context) error { _, err := s.client(r).Pause(ctx, id, reason); return err }
	case "resume":
		do = func(ctx context.Context) error { _, err := s.client(r).Resume(ctx, id, reason); return err }
	case "close":
		do = func(ctx context.Context) error {
			_, err := s.client(r).Close(ctx, id, events.SessionClosed{Reason: reason, Outcome: "closed from the console"})
			return err
		}
	default:
		s.fail(w, r, action, fmt.Errorf("%w: the action is pause, resume or close, not %q", errBadRequest, action))
		return
	}
	if err := do(ctx); err != nil {
		s.fail(w, r, action+" "+id, err)
		return
	}
	http.Redirect(w, r, "/s/"+url.PathEscape(id), http.StatusSeeOther)
}

type comparePage struct {
	Frame
	A, B string
	C    *replay.Contrast
	// NameA and NameB are the branches' names in A's tree (as its dossier
	// names them; empty when B is of another tree); BadgeA and BadgeB their
	// outcomes.
	NameA, NameB   string
	BadgeA, BadgeB badge
}

// compare is `rath diff A B` as a page: outcomes, usage, files changed and
// the events after the common ancestor, side by side.
func (s *Server) compare(w http.ResponseWriter, r *http.Request) {
	p := comparePage{A: strings.TrimSpace(r.URL.Query().Get("a")), B: strings.TrimSpace(r.URL.Query().Get("b"))}
	for _, id := range []string{p.A, p.B} {
		if err := validID(id); err != nil {
			s.fail(w, r, "compare", fmt.Errorf("%w (want /compare?a=SESSION&b=SESSION)", err))
			return
		}
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	c, err := replay.ReadContrast(ctx, s.client(r), p.A, p.B)
	if err != nil {
		s.fail(w, r, "compare "+p.A+" with "+p.B, err)
		return
	}
	p.C = &c
	if names, err := dossier.LineageNames(ctx, s.client(r), p.A); err == nil {
		p.NameA, p.NameB = names[p.A], names[p.B]
		// The sessions reasons and summaries name, by their names.
		c.A.Reason, c.B.Reason = dossier.ReplaceIDs(c.A.Reason, names), dossier.ReplaceIDs(c.B.Reason, names)
		for _, e := range c.Events {
			for _, b := range []*replay.Brief{e.A, e.B} {
				if b != nil {
					b.Summary = dossier.ReplaceIDs(b.Summary, names)
				}
			}
		}
	}
	p.BadgeA = badgeOf(c.A.Status, c.A.Outcome, c.A.Reason, nil)
	p.BadgeB = badgeOf(c.B.Status, c.B.Outcome, c.B.Reason, nil)
	s.render(w, r, "compare.html", "Compare", &p)
}
