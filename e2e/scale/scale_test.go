package e2e_test

// These tests run Rath as it runs in production: every service is its own OS
// process (one ledger, three each of selector, agent worker and tool runner)
// on a JetStream server embedded in the test process, and sessions of a
// small two-agent workflow (testdata/scale) go through them by the hundred.
// The worker processes share their kind's durable consumer, so a session's
// events are handled by whichever process pulls them: the logs must stay
// linear and duplicate-free, and no session may ever run two turns at once.
// The second test kills one process of each worker kind with SIGKILL while
// sessions are in flight; what the dead processes held comes back only when
// the consumers' AckWait runs out (30s for the selector, 1m for the agent
// worker and the tool runner), which bounds how fast that test can be.
// Both are skipped with -short, and run in parallel: the kill test spends
// most of its minute waiting. A third test replays, in-process and
// deterministically, each point at which the kill can interrupt an agent
// worker's turn.

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/events"
)

// TestScaleAcrossProcesses runs 200 sessions through three processes of each
// worker kind and checks every log, and that the work spread over all nine.
func TestScaleAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ten service processes; skipped with -short")
	}
	t.Parallel()
	const sessions = 200
	setup := time.Now()
	r := startScaleRig(t, 3)
	start := r.uploadWorkflow(t, "scale.yaml")
	t.Logf("rig of %d processes up in %s", len(r.procs), time.Since(setup).Round(time.Millisecond))

	ids := sessionIDs("spread", sessions)
	began := time.Now()
	r.startSessions(t, start, ids)
	started := time.Since(began)
	r.mustClose(t, ids, 3*time.Minute)
	took := time.Since(began)

	reports := r.checkSessions(t, ids)
	reportProblems(t, r, reports, nil)
	total := 0
	counts := map[int]int{}
	var pause sessionReport // the session with the longest pause between two events
	for _, rep := range reports {
		total += rep.events
		counts[rep.events]++
		if rep.stall > pause.stall {
			pause = rep
		}
	}
	t.Logf("%d sessions (%d events; sessions by event count %v) started in %s, all closed %s after the first start: %.0f sessions/s, %.0f events/s; longest pause in a session %s (%s, before an event of the %s)",
		sessions, total, counts, started.Round(time.Millisecond), took.Round(time.Millisecond),
		float64(sessions)/took.Seconds(), float64(total)/took.Seconds(), pause.stall.Round(time.Millisecond), pause.id, pause.resumedBy)
	if pause.stall > 2*time.Second {
		t.Logf("the longest pause, in %s:\n%s", pause.id, r.around(t, pause.id, pause.stallSeq))
	}
	if len(counts) != 1 || counts[wantEvents] != sessions {
		t.Errorf("sessions by event count %v, want all %d with %d events (a run without faults has no retries)", counts, sessions, wantEvents)
	}

	// The spread: every worker process proposed events of its own, and every
	// tool runner placed workspaces (under its own root).
	roots := map[string]int{}
	for _, rep := range reports {
		roots[rep.root]++
	}
	for _, kind := range workerKinds {
		var spread []string
		for _, p := range r.ofKind(kind) {
			n, _ := r.tap.proposals(p)
			s := fmt.Sprintf("%s %d", p.name, n)
			switch kind {
			case kindSelector:
				s += fmt.Sprintf(" (%d routed)", strings.Count(p.stderr.String(), `"msg":"routed"`))
			case kindRunner:
				s += fmt.Sprintf(" (%d workspaces)", roots[p.workspaces])
				if roots[p.workspaces] == 0 {
					t.Errorf("no session was placed under %s's workspace root", p.name)
				}
			}
			spread = append(spread, s)
			if n == 0 {
				t.Errorf("%s proposed no event: the work did not spread over the %s processes", p.name, kind)
			}
		}
		t.Logf("events proposed per %s process: %s", kind, strings.Join(spread, ", "))
	}
	if len(roots) != len(r.ofKind(kindRunner)) {
		t.Errorf("sessions placed under %d workspace roots, want %d (one per tool runner): %v", len(roots), len(r.ofKind(kindRunner)), roots)
	}
}

// TestScaleSurvivesKill9 starts 100 sessions and, once some have closed,
// kills the busiest process of each worker kind with SIGKILL: every session
// must still close as it should, from what the two processes left of each
// kind take over, with logs as clean as without the kill.
func TestScaleSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ten service processes; skipped with -short")
	}
	t.Parallel()
	const sessions = 100
	r := startScaleRig(t, 3)
	start := r.uploadWorkflow(t, "scale.yaml")

	// Sessions start one every 30ms, faster than they finish: at the kill
	// there are sessions at every step, and more start after it, so the
	// survivors of each kind take over what the victims held and do new work.
	ids := sessionIDs("kill", sessions)
	began := time.Now()
	var started atomic.Int64
	starting := r.startPaced(start, ids, 30*time.Millisecond, &started)
	var closed int
	testrig.Eventually(t, time.Minute, "some sessions closed", func() (bool, string) {
		closed = len(ids) - len(r.closes.open(ids))
		return closed >= 5, fmt.Sprintf("%d started, %d closed", started.Load(), closed)
	})
	begun := int(started.Load())

	// The busiest process of each kind holds the most work in flight.
	var victims []*proc
	for _, kind := range workerKinds {
		ps := r.ofKind(kind)
		slices.SortFunc(ps, func(a, b *proc) int {
			na, _ := r.tap.proposals(a)
			nb, _ := r.tap.proposals(b)
			return nb - na
		})
		victims = append(victims, ps[0])
	}
	for _, p := range victims {
		p.kill9(t)
	}
	killedAt := time.Now()
	r.tap.setMark()
	var pending []string
	for _, kind := range workerKinds {
		ci := r.consumer(t, kind)
		pending = append(pending, fmt.Sprintf("%s %d", kind, ci.NumAckPending))
	}
	t.Logf("%s after the first start, with %d sessions started and %d closed: kill -9 %s; deliveries then unacked: %s",
		killedAt.Sub(began).Round(time.Millisecond), begun, closed, names(victims), strings.Join(pending, ", "))
	for err := range starting {
		t.Fatal(err)
	}
	if begun == sessions {
		t.Errorf("all %d sessions had started before the kill: raise the number of sessions or slow the starts", sessions)
	}

	// Every delivery the victims held comes back within the longest
	// AckWait (1m) of the kill; sessions still open well after that are
	// stuck.
	_, allClosed := r.waitClosed(t, ids, 80*time.Second-time.Since(killedAt))
	recovered := time.Since(killedAt)

	reports := r.checkSessions(t, ids)
	// A worker killed halfway through recording a turn leaves the turn to a
	// takeover that goes wrong (TestWorkerTakesOverAPartlyRecordedTurn has
	// the details): such sessions are told apart, as long as their logs are
	// sound, and skip the test if they are its only failures.
	interrupted := reportProblems(t, r, reports, func(rep sessionReport) bool {
		return rep.interrupted != "" && len(rep.integrity) == 0
	})
	var last time.Time
	var stalled []string
	byResumer := map[string]int{}
	for _, rep := range reports {
		if rep.closedAt.After(last) {
			last = rep.closedAt
		}
		// A session that waited this long waited for a redelivery: nothing
		// else in this workflow takes more than a fraction of a second.
		if rep.stall >= 15*time.Second {
			byResumer[rep.resumedBy]++
			stalled = append(stalled, fmt.Sprintf("%s %s (resumed by %s)", rep.id, rep.stall.Round(100*time.Millisecond), rep.resumedBy))
		}
	}
	sort.Strings(stalled)
	if allClosed {
		t.Logf("all %d sessions closed %s after the kill (the last close event is %s after it)",
			sessions, recovered.Round(time.Millisecond), last.Sub(killedAt).Round(time.Millisecond))
	}
	t.Logf("%d sessions waited for a redelivery; by the kind that resumed them: %v", len(stalled), byResumer)
	if len(stalled) > 0 {
		t.Logf("stalls: %s", strings.Join(firstN(stalled, 12), "; "))
	}
	if len(stalled) == 0 {
		t.Errorf("no session waited for a redelivery: the killed processes held no work, so the test exercised no recovery")
	}

	for _, kind := range workerKinds {
		var after []string
		took := 0
		for _, p := range r.ofKind(kind) {
			_, n := r.tap.proposals(p)
			// A killed process's last requests can still be in the
			// server's read buffer when it dies: only survivors count.
			if p.killed.IsZero() {
				took += n
				after = append(after, fmt.Sprintf("%s %d", p.name, n))
			}
		}
		t.Logf("events proposed after the kill per surviving %s process: %s", kind, strings.Join(after, ", "))
		if took == 0 {
			t.Errorf("no surviving %s process proposed an event after the kill", kind)
		}
	}

	if len(interrupted) == 0 {
		return
	}
	var which []string
	for _, rep := range interrupted {
		which = append(which, fmt.Sprintf("%s (%s): %s", rep.id, rep.interrupted, strings.Join(rep.outcome, "; ")))
	}
	t.Logf("sessions whose turn the killed worker had half recorded:\n\t%s", strings.Join(which, "\n\t"))
	if t.Failed() {
		t.Errorf("besides, %d sessions hit the known bug of taking over a half-recorded turn", len(interrupted))
		return
	}
	t.Errorf("%d sessions lost a turn taken over from a killed worker (see TestWorkerTakesOverAPartlyRecordedTurn)", len(interrupted))
}

// wantEvents is the length of a session's log in a run without faults:
// start; planner turn (decision, request, chunk, model call, completion);
// worker turn (decision, request, chunk, model call, tool request,
// completion); the tool call (placement, start, result chunk, completion);
// the worker's second turn (decision, request, chunk, model call,
// completion); the close decision and the close.
const wantEvents = 23

// sessionReport is what checkSessions learned from one session's log.
type sessionReport struct {
	id     string
	events int
	// root is the workspace root the tool runner that placed the session
	// uses (each tool runner process has its own).
	root     string
	closedAt time.Time
	// stall is the longest time between two consecutive events, and
	// resumedBy the source of the event that ended it, at stallSeq.
	stall     time.Duration
	resumedBy string
	stallSeq  uint64
	// interrupted describes the agent turn whose worker events straddle the
	// stall (a worker died halfway through recording it), if any.
	interrupted string
	// integrity lists problems with the log itself (chain, sequence,
	// duplicates, overlapping turns); outcome lists deviations from the
	// workflow's scripted path.
	integrity, outcome []string
}

// checkSessions reads and verifies every session's log and checks the
// workflow ran as scripted in each.
func (r *scaleRig) checkSessions(t *testing.T, ids []string) []sessionReport {
	t.Helper()
	var reports []sessionReport
	for _, id := range ids {
		log := r.readLog(t, id)
		rep := checkScaleSession(id, log)
		rep.integrity = append(r.checkChain(t, id, log), rep.integrity...)
		reports = append(reports, rep)
	}
	return reports
}

// reportProblems fails the test with the sessions' problems (the first few
// in full), except those of sessions excuse accepts, which it returns.
func reportProblems(t *testing.T, r *scaleRig, reports []sessionReport, excuse func(sessionReport) bool) []sessionReport {
	t.Helper()
	var problems, bad []string
	var excused []sessionReport
	for _, rep := range reports {
		if len(rep.integrity)+len(rep.outcome) == 0 {
			continue
		}
		if excuse != nil && excuse(rep) {
			excused = append(excused, rep)
			continue
		}
		bad = append(bad, rep.id)
		problems = append(problems, fmt.Sprintf("session %s: %s", rep.id, strings.Join(append(rep.integrity, rep.outcome...), "; ")))
	}
	for _, p := range firstN(problems, 8) {
		t.Error(p)
	}
	if len(bad) > 0 {
		t.Errorf("%d of %d sessions have problems: %v", len(bad), len(reports), firstN(bad, 30))
		for _, id := range bad[:min(2, len(bad))] {
			t.Log(r.describe(t, id))
		}
	}
	return excused
}

// checkScaleSession checks one closed session of testdata/scale/scale.yaml:
// no turns overlap; the planner, then the worker twice, were routed by the
// workflow's rules; the tool ran once, successfully, in a workspace; the
// worker saw its output; the session closed as succeeded; and nothing
// failed on the way.
func checkScaleSession(id string, log []events.Stored) sessionReport {
	rep := sessionReport{id: id, events: len(log), integrity: overlappingTurns(log)}
	var bad []string
	var routes []string
	var lastWorker string
	completed := 0
	stallAt := 0 // index of the event that ended the longest stall
	for i, ev := range log {
		if i > 0 {
			if gap := ev.Time.Sub(log[i-1].Time); gap > rep.stall {
				rep.stall, rep.resumedBy, rep.stallSeq, stallAt = gap, strings.TrimPrefix(ev.Source, "rath/"), ev.Seq, i
			}
		}
		switch ev.Type {
		case events.TypeTurnRequested:
			var d events.TurnRequested
			_ = json.Unmarshal(ev.Data, &d)
			routes = append(routes, d.Rule+"→"+d.Agent)
		case events.TypeChunkAppended:
			var d events.ChunkAppended
			_ = json.Unmarshal(ev.Data, &d)
			if d.Role == events.RoleAssistant && d.Agent == "worker" {
				lastWorker = d.Content
			}
		case events.TypeSandboxPlaced:
			var d events.SandboxPlaced
			_ = json.Unmarshal(ev.Data, &d)
			// A second placement is right only when the runner holding the
			// first is gone, and it must say so.
			if rep.root != "" && !strings.Contains(d.Reason, "did not answer") {
				bad = append(bad, fmt.Sprintf("placed twice (seq %d: %s: %s)", ev.Seq, d.Workspace, d.Reason))
			}
			rep.root = filepath.Dir(d.Workspace)
		case events.TypeToolCompleted:
			var d events.ToolCompleted
			_ = json.Unmarshal(ev.Data, &d)
			completed++
			if d.ExitCode != 0 || !strings.Contains(d.Result, "scale-ok") {
				bad = append(bad, fmt.Sprintf("tool call %s ended with exit %d: %q", d.CallID, d.ExitCode, d.Result))
			}
		case events.TypeTurnFailed, events.TypeToolFailed, events.TypeHandlerFailed, events.TypeModelCallFailed:
			bad = append(bad, fmt.Sprintf("seq %d is %s: %s", ev.Seq, ev.Type, ev.Data))
		case events.TypeSessionClosed:
			var d events.SessionClosed
			_ = json.Unmarshal(ev.Data, &d)
			rep.closedAt = ev.Time
			if d.Outcome != "succeeded" {
				bad = append(bad, fmt.Sprintf("closed %s (%s)", d.Outcome, d.Reason))
			}
			if i != len(log)-1 {
				bad = append(bad, fmt.Sprintf("%d events after the close at seq %d", len(log)-1-i, ev.Seq))
			}
		}
	}
	if rep.closedAt.IsZero() {
		bad = append(bad, "not closed")
	}
	if want := []string{"start→planner", "work-after-plan→worker", "continue→worker"}; !slices.Equal(routes, want) {
		bad = append(bad, fmt.Sprintf("turns routed %v, want %v", routes, want))
	}
	if completed != 1 || rep.root == "" {
		bad = append(bad, fmt.Sprintf("%d tool completions, placed under %q; want one completion in a placed workspace", completed, rep.root))
	}
	if lastWorker != "The check printed scale-ok." {
		bad = append(bad, fmt.Sprintf("the worker's last answer is %q: it did not see the tool's output", lastWorker))
	}
	rep.outcome = bad
	// A worker that died while recording a turn stored the turn's first
	// events before the stall; its successor stored the rest after it.
	if rep.stall >= 15*time.Second {
		for _, req := range log[:stallAt] {
			if req.Type != events.TypeTurnRequested {
				continue
			}
			var before, after []string
			for k, ev := range log {
				if ev.Causation == req.ID && ev.Source == "rath/agent-worker" {
					short := strings.TrimPrefix(ev.Type, "rath.")
					if k < stallAt {
						before = append(before, short)
					} else {
						after = append(after, short)
					}
				}
			}
			if len(before) > 0 && len(after) > 0 {
				rep.interrupted = fmt.Sprintf("turn at seq %d: %v stored before a %s stall, %v after", req.Seq, before, rep.stall.Round(time.Second), after)
			}
		}
	}
	return rep
}

// appendEnds are the numbers of a turn's events a crash can leave stored:
// none, and the events up to the end of each of the worker's appends. The
// answer (text, tool requests, model call) and the turn's end are one
// atomic append; anything else the worker stores is an append of its own.
func appendEnds(turn workerTurn) []int {
	ends := []int{0}
	for i, we := range turn.evs {
		if we.what == "chunk" || we.what == "model" || strings.HasPrefix(we.what, "tool-") {
			continue // inside the answer's atomic append
		}
		ends = append(ends, i+1)
	}
	return ends
}

func sessionIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return ids
}

func names(ps []*proc) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.name)
	}
	return strings.Join(s, ", ")
}

// TestWorkerTakesOverAPartlyRecordedTurn is the kill test's agent worker
// case made deterministic: a worker killed while it records a turn has
// stored some of the turn's appends (a compaction, a failed attempt, each its
// own; the answer with the turn's end, one atomic append: all of it or
// none); the turn request comes back after the consumer's AckWait and
// another worker must finish the turn as if nothing had happened. The test
// runs one session with a live worker as the reference, stops the worker,
// then prepares a session for every crash point: every turn before the
// crashed one stored in full, and the crashed turn's events up to the end of
// one of its appends, exactly as the reference worker stored them (names and
// order come from the reference, so they follow the worker's code). Meanwhile the tool runner runs what the planted events ask for, as
// it would during the AckWait. Then a new worker starts and takes every
// crashed turn over. Each session must end as the reference did, with each
// turn recording what the reference recorded.
func TestWorkerTakesOverAPartlyRecordedTurn(t *testing.T) {
	p := startInProcess(t)
	start := p.uploadWorkflow(t, "scale.yaml")
	start.Task = "the scale check" // the same transcript in every session, for the same token counts

	stopWorker := p.runWorker(t)
	p.startSessions(t, start, []string{"reference"})
	p.mustClose(t, []string{"reference"}, 20*time.Second)
	stopWorker()
	refLog := p.readLog(t, "reference")
	if rep := checkScaleSession("reference", refLog); len(rep.integrity)+len(rep.outcome) > 0 {
		t.Fatalf("the reference session went wrong: %s", strings.Join(append(rep.integrity, rep.outcome...), "; "))
	}
	ref := workerTurns(t, refLog)

	type crash struct {
		id         string
		turn, kept int // the crashed turn (0-based) and how many of its events were stored
	}
	var crashes []crash
	var ids []string
	for j, turn := range ref {
		for _, k := range appendEnds(turn) { // k = 0 is a worker that died before storing anything: the control
			c := crash{id: fmt.Sprintf("crash-turn%d-after%d", j+1, k), turn: j, kept: k}
			crashes = append(crashes, c)
			ids = append(ids, c.id)
		}
	}
	p.startSessions(t, start, ids)
	// Turn by turn over all sessions, so the waits for the selector and the
	// tool runner overlap.
	for j := range ref {
		for _, c := range crashes {
			if c.turn < j {
				continue
			}
			req, turnID := p.nthTurnRequest(t, c.id, j)
			n := len(ref[j].evs)
			if j == c.turn {
				n = c.kept
			}
			for _, we := range ref[j].evs[:n] {
				p.plant(t, req, turnID, ref[j], we)
			}
		}
	}
	testrig.Eventually(t, 20*time.Second, "the selector and the tool runner done with the planted events", func() (bool, string) {
		for _, durable := range []string{kindSelector, kindRunner} {
			if ok, state := p.idle(t, durable); !ok {
				return false, state
			}
		}
		return true, ""
	})

	p.runWorker(t)
	p.waitClosed(t, ids, 15*time.Second)
	var failed []string
	for _, c := range crashes {
		log := p.readLog(t, c.id)
		rep := checkScaleSession(c.id, log)
		problems := append(append(p.checkChain(t, c.id, log), rep.integrity...), rep.outcome...)
		got := workerTurns(t, log)
		for j := range min(len(got), len(ref)) {
			for _, d := range sameTurn(got[j], ref[j]) {
				problems = append(problems, fmt.Sprintf("turn %d: %s", j+1, d))
			}
		}
		if len(problems) == 0 {
			continue
		}
		failed = append(failed, c.id)
		what := make([]string, c.kept)
		for i, we := range ref[c.turn].evs[:c.kept] {
			what[i] = we.what
		}
		t.Errorf("worker killed in turn %d (%s) after storing %v, turn taken over by another worker:\n\t%s\n%s",
			c.turn+1, ref[c.turn].evs[0].ev.Source, what, strings.Join(problems, "\n\t"), p.describe(t, c.id))
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d crash points end wrong: %v", len(failed), len(crashes), failed)
	}
}
