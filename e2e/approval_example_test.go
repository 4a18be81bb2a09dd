package e2e_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/dossier"
	"github.com/openrath/rath/internal/replay"
	"github.com/openrath/rath/internal/rerun"
	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
	worker "github.com/openrath/rath/services/agent-worker/service"
)

// approvalExample is examples/approval, the directory its workspace is
// seeded from.
const approvalExample = "../examples/approval"

// waitForApproval waits for the example's gated run and returns it, as
// rath approvals lists it.
func (r *rig) waitForApproval(t *testing.T, id string) client.PendingApproval {
	t.Helper()
	r.until(t, id, "approval request", ofType(events.TypeApprovalRequested))
	r.until(t, id, "end of the gated turn", func(ev events.Stored) bool {
		return ev.Type == events.TypeTurnCompleted && data[events.TurnCompleted](t, ev).ToolCalls == 1
	})
	pending, err := r.c.Pending(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 1 {
		t.Fatalf("%s: pending approvals %+v, want the test run", id, pending)
	}
	p := pending[0]
	if p.Tool != "run" || p.Gate != "run-needs-approval" || p.Approver != "maintainers" || p.Agent != "coder" ||
		!strings.Contains(string(p.Arguments), `"go","test"`) {
		t.Fatalf("%s: pending approval %+v", id, p)
	}
	return p
}

// examples/approval through a grant and a rejection, as its README runs
// it: the granted run passes the tests and the coder settles its open work;
// the rejected one never runs, the coder reads why, and the session closes
// incomplete with the work still open.
func TestApprovalExample(t *testing.T) {
	r := startSeeded(t, approvalExample, worker.DefaultConfig(), quiet)
	ctx := context.Background()
	cases := []struct {
		name, id string
		decide   func(p client.PendingApproval) error
		outcome  string
		last     string
		open     int // work items left open
		ran      int // runs of the gated call
	}{
		{name: "granted", id: "granted", outcome: "succeeded", last: "Done.", open: 0, ran: 1,
			decide: func(p client.PendingApproval) error {
				_, err := r.c.Approve(ctx, p.Session, p.ApprovalID, "tests only")
				return err
			}},
		{name: "rejected", id: "rejected", outcome: "incomplete", last: "The run was rejected, so the tests were not run; I leave them open.", open: 1,
			decide: func(p client.PendingApproval) error {
				_, err := r.c.Reject(ctx, p.Session, p.ApprovalID, "not before the release")
				return err
			}},
		// The timeout case (issue 15, item 3: durable timers) joins here: a
		// gate with a timeout whose approval expires, deciding nothing, and
		// the session routed as the gate's expiry says.
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r.startWorkflow(t, tc.id, filepath.Join(approvalExample, "workflow.yaml"),
				events.SessionStarted{Task: "make TestAdd pass", Labels: map[string]string{"workspace": "repo"}})
			p := r.waitForApproval(t, tc.id)
			if err := tc.decide(p); err != nil {
				t.Fatal(err)
			}
			r.until(t, tc.id, "close", ofType(events.TypeSessionClosed))
			st, err := r.c.State(ctx, tc.id)
			if err != nil {
				t.Fatal(err)
			}
			last := st.Chunks[len(st.Chunks)-1]
			if st.Outcome != tc.outcome || last.Content != tc.last || len(st.Pending) != tc.open || len(r.started(t, tc.id, p.CallID)) != tc.ran {
				t.Fatalf("ended %s (%s), last %q, open work %+v, the call ran %d times", st.Outcome, st.CloseReason, last.Content,
					st.Pending, len(r.started(t, tc.id, p.CallID)))
			}
			if a := st.Approvals[p.ApprovalID]; a.Actor != r.c.Principal().String() {
				t.Fatalf("decided by %q, want %s", a.Actor, r.c.Principal())
			}
			if call := st.Tools[p.CallID]; tc.ran == 1 && (call.Status != session.ToolCompleted || call.ExitCode != 0) {
				t.Fatalf("the granted run: %+v", call)
			}

			// The evidence: the dossier names who decided, when, what, and
			// what followed; rath audit approved answers it from the call's
			// step.
			d, err := dossier.Build(ctx, r.c, tc.id, dossier.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Interventions) != 1 {
				t.Fatalf("interventions %+v", d.Interventions)
			}
			iv := d.Interventions[0]
			if iv.Kind != tc.name || iv.Actor != r.c.Principal().String() || iv.ApprovalID != p.ApprovalID || iv.CallID != p.CallID ||
				iv.Action != p.Action || iv.Requested == nil || iv.Requested.Seq != p.Seq || iv.Call == nil || iv.Next == nil || iv.Next.Agent != "coder" {
				t.Fatalf("intervention %+v", iv)
			}
			ans, err := d.Approved(tc.id, st.Tools[p.CallID].Seqs[0])
			if err != nil || ans.Decision == nil || ans.Decision.Kind != tc.name || ans.Decision.Actor != r.c.Principal().String() ||
				ans.Tool != "run" || !strings.Contains(string(ans.Arguments), "go") {
				t.Fatalf("who decided the call: %+v %v", ans, err)
			}
			if len(d.Work) != 1 || d.Work[0].WorkID != "tests" || (d.Work[0].Done == nil) != (tc.open == 1) {
				t.Fatalf("work %+v", d.Work)
			}
			md := dossier.Markdown(d)
			if !strings.Contains(md, "## People in the loop") || !strings.Contains(md, "## Pending work") {
				t.Fatalf("dossier.md lacks the people in the loop or the work:\n%s", md)
			}
		})
	}
	// Nobody decides: the same workflow with a 2-second timeout expires the
	// approval through its durable timer, the call fails without running,
	// the coder reads why and the session closes incomplete; a late
	// decision is refused.
	t.Run("timeout", func(t *testing.T) {
		dir := t.TempDir()
		wf, err := os.ReadFile(filepath.Join(approvalExample, "workflow.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		short := strings.Replace(string(wf), "timeout: 30m", "timeout: 2s", 1)
		if short == string(wf) {
			t.Fatal("the example's gate has no timeout: 30m to shorten")
		}
		script, err := os.ReadFile(filepath.Join(approvalExample, "coder.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for name, body := range map[string]string{"workflow.yaml": short, "coder.yaml": string(script)} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		r.startWorkflow(t, "timed-out", filepath.Join(dir, "workflow.yaml"),
			events.SessionStarted{Task: "make TestAdd pass", Labels: map[string]string{"workspace": "repo"}})
		p := r.waitForApproval(t, "timed-out")
		r.until(t, "timed-out", "expiry", ofType(events.TypeApprovalExpired))
		r.until(t, "timed-out", "close", ofType(events.TypeSessionClosed))
		st, err := r.c.State(ctx, "timed-out")
		if err != nil {
			t.Fatal(err)
		}
		last := st.Chunks[len(st.Chunks)-1]
		if st.Outcome != "incomplete" || last.Content != "Nobody approved the run in time, so the tests were not run; I leave them open." ||
			len(st.Pending) != 1 || len(r.started(t, "timed-out", p.CallID)) != 0 {
			t.Fatalf("ended %s (%s), last %q, open work %+v, the call ran %d times", st.Outcome, st.CloseReason, last.Content,
				st.Pending, len(r.started(t, "timed-out", p.CallID)))
		}
		// The session closed: a late decision is refused (on a session still
		// open it is approval_expired: TestGateTimeoutRejects).
		if _, err := r.c.Approve(ctx, "timed-out", p.ApprovalID, "too late"); !errors.Is(err, api.ErrClosed) && !errors.Is(err, api.ErrApprovalExpired) {
			t.Fatalf("approving after the deadline: %v, want a refusal", err)
		}
		d, err := dossier.Build(ctx, r.c, "timed-out", dossier.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Interventions) != 1 || d.Interventions[0].Kind != "expired" {
			t.Fatalf("interventions %+v, want the expiry", d.Interventions)
		}
	})
}

// The README's last step: a person corrects the rejected session where the
// rejection ended the call (the maintainers ran the tests by hand), and the
// coder resumes on the fork, settles its open work and the fork succeeds.
func TestApprovalExampleCorrected(t *testing.T) {
	r := startSeeded(t, approvalExample, worker.DefaultConfig(), quiet)
	ctx := context.Background()
	r.startWorkflow(t, "rej", filepath.Join(approvalExample, "workflow.yaml"),
		events.SessionStarted{Task: "make TestAdd pass", Labels: map[string]string{"workspace": "repo"}})
	p := r.waitForApproval(t, "rej")
	if _, err := r.c.Reject(ctx, "rej", p.ApprovalID, "not before the release"); err != nil {
		t.Fatal(err)
	}
	failed := r.until(t, "rej", "the rejected call's end", ofType(events.TypeToolFailed))
	r.until(t, "rej", "close", ofType(events.TypeSessionClosed))
	done, err := r.c.Correct(ctx, client.Correction{Session: "rej", At: failed.Seq, ID: "rej-fixed",
		Say: "The maintainers ran the tests by hand: ok, they pass."})
	if err != nil {
		t.Fatal(err)
	}
	fork, last := r.closeFork(t, done.Fork.Session)
	if fork.Outcome != "succeeded" || last.Content != "Done." || len(fork.Pending) != 0 {
		var said []string
		for _, c := range fork.Chunks {
			said = append(said, c.Role+": "+c.Content)
		}
		t.Fatalf("fork ended %s, open work %+v, chunks:\n%s", fork.Outcome, fork.Pending, strings.Join(said, "\n"))
	}
	d, err := dossier.Build(ctx, r.c, "rej", dossier.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, iv := range d.Interventions {
		kinds = append(kinds, iv.Branch+":"+iv.Kind)
		if iv.Kind == dossier.InterventionSaid && (iv.Actor != r.c.Principal().String() || iv.Next == nil || iv.Next.Rule != "correction") {
			t.Fatalf("the correction %+v", iv)
		}
	}
	if got := strings.Join(kinds, " "); got != "rej:rejected rej-fixed:said" {
		t.Fatalf("interventions %s", got)
	}
	var settled bool
	for _, w := range d.Work {
		settled = settled || w.Branch == "rej-fixed" && w.AddedIn != nil && w.AddedIn.Branch == "rej" && w.Done != nil
	}
	if !settled {
		t.Fatalf("the fork's settling of the parent's work: %+v", d.Work)
	}

	// A replay reproduces the person's rejection, fork and correction from
	// the record.
	if testing.Short() {
		return
	}
	orig, err := replay.Read(ctx, r.c, "rej")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := rerun.Reexecute(ctx, r.c, orig, rerun.Options{Runtime: runtime.DefaultConfig(),
		Wait: 2 * time.Minute, Idle: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var applied []string
	for _, in := range rep.External {
		if in.Applied {
			applied = append(applied, in.Branch+":"+in.Type)
		}
	}
	if want := "root:rath.approval.rejected root.1:rath.session.forked root.1:rath.conversation.chunk.appended"; !rep.Reproduced || strings.Join(applied, " ") != want {
		t.Fatalf("replay of the correction: reproduced %v, applied %v, want %s", rep.Reproduced, applied, want)
	}
}
