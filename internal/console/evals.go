package console

import (
	"cmp"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// The labels rath eval gives each run's session (internal/eval: LabelEval,
// LabelTask, LabelTry, LabelGrades), spelt here so that the console does
// not link the eval runner and its CEL; a test checks they agree.
const (
	labelEval   = "eval"
	labelTask   = "eval_task"
	labelTry    = "eval_try"
	labelGrades = "eval_grades"
)

// maxEvalSessions bounds the sessions the evals page reads: one page of
// the ledger's catalog, the most recently active first.
const maxEvalSessions = 5000

type evalsPage struct {
	Frame
	Evals []evalGroup
	// Only is the eval the page was narrowed to (?eval=ID); Truncated
	// says the ledger had more eval sessions than the page read.
	Only      string
	Truncated bool
}

// evalGroup is one eval run: the sessions labelled eval=ID, by task.
type evalGroup struct {
	ID        string
	Started   time.Time
	Runs      int
	Succeeded int
	Tasks     []evalTask
}

// evalTask is one task of an eval run: its runs, how many closed
// succeeded, and each run's session.
type evalTask struct {
	ID        string
	Runs      int
	Succeeded int
	Open      int
	Sessions  []evalRun
}

type evalRun struct {
	Session string
	Try     string
	Badge   badge
}

// Rate is the share of the runs that closed succeeded, as text.
func (t evalTask) Rate() string { return rate(t.Succeeded, t.Runs) }

// Rate is the share of the eval's runs that closed succeeded.
func (g evalGroup) Rate() string { return rate(g.Succeeded, g.Runs) }

func rate(n, of int) string {
	if of == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(n)/float64(of), 'f', 2, 64)
}

// evals lists the eval runs among the sessions the console may read: the
// sessions labelled eval, grouped by that label and by their task
// (eval_task), each task with its runs' success by close outcome and a
// link to every run. A grading fork (labelled eval_grades) is not a run.
// The ledger keeps outcomes, not grades: a task file's graders may be
// stricter, and its report (or rath eval --baseline ID) has the grades.
func (s *Server) evals(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	p := evalsPage{Only: r.URL.Query().Get("eval")}
	page, err := s.client(r).ListPage(ctx, api.ListRequest{Match: labelEval + "=", Order: "active", Limit: maxEvalSessions})
	if err != nil {
		s.fail(w, r, "list eval sessions", err)
		return
	}
	p.Truncated = page.Next != ""
	groups := map[string]*evalGroup{}
	tasks := map[[2]string]*evalTask{}
	for _, ss := range page.Sessions {
		id, ok := ss.Labels[labelEval]
		if _, grading := ss.Labels[labelGrades]; !ok || grading || (p.Only != "" && id != p.Only) {
			continue
		}
		g := groups[id]
		if g == nil {
			g = &evalGroup{ID: id, Started: ss.Created}
			groups[id] = g
		}
		if ss.Created.Before(g.Started) {
			g.Started = ss.Created
		}
		key := [2]string{id, ss.Labels[labelTask]}
		t := tasks[key]
		if t == nil {
			t = &evalTask{ID: ss.Labels[labelTask]}
			tasks[key] = t
		}
		t.Runs++
		g.Runs++
		b := badgeOf(ss.Status, ss.Outcome, "", nil)
		switch {
		case b.Class == "succeeded":
			t.Succeeded++
			g.Succeeded++
		case !session.Status(ss.Status).Ended():
			t.Open++
		}
		t.Sessions = append(t.Sessions, evalRun{Session: ss.ID, Try: ss.Labels[labelTry], Badge: b})
	}
	for key, t := range tasks {
		slices.SortFunc(t.Sessions, func(a, b evalRun) int {
			ai, _ := strconv.Atoi(a.Try)
			bi, _ := strconv.Atoi(b.Try)
			return cmp.Or(cmp.Compare(ai, bi), strings.Compare(a.Session, b.Session))
		})
		g := groups[key[0]]
		g.Tasks = append(g.Tasks, *t)
	}
	for _, g := range groups {
		slices.SortFunc(g.Tasks, func(a, b evalTask) int { return strings.Compare(a.ID, b.ID) })
		p.Evals = append(p.Evals, *g)
	}
	// The newest eval first.
	slices.SortFunc(p.Evals, func(a, b evalGroup) int {
		return cmp.Or(b.Started.Compare(a.Started), strings.Compare(a.ID, b.ID))
	})
	s.render(w, r, "evals.html", "Evals", &p)
}
