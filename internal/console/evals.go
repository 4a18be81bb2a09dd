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
// link to every run. A grading fork (labelled eval_grades) is not a run,
// nor is a fork the run's workflow made: the run links to the branch it
// ended on.
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
	// Forks inherit the eval's labels: a run is a session without a
	// parent, and one its workflow forked and went on from (closed
	// superseded) ended on its newest fork.
	forks := map[string][]api.Session{}
	for _, ss := range page.Sessions {
		if _, grading := ss.Labels[labelGrades]; !grading && ss.Parent != "" {
			forks[ss.Parent] = append(forks[ss.Parent], ss)
		}
	}
	for _, ss := range page.Sessions {
		id, ok := ss.Labels[labelEval]
		if _, grading := ss.Labels[labelGrades]; !ok || grading || ss.Parent != "" || (p.Only != "" && id != p.Only) {
			continue
		}
		started := ss.Created
		for hops := 0; ss.Outcome == "superseded" && len(forks[ss.ID]) > 0 && hops < 64; hops++ {
			kids := forks[ss.ID]
			ss = slices.MaxFunc(kids, func(a, b api.Session) int { return a.Created.Compare(b.Created) })
		}
		g := groups[id]
		if g == nil {
			g = &evalGroup{ID: id, Started: started}
			groups[id] = g
		}
		if started.Before(g.Started) {
			g.Started = started
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
