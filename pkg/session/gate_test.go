package session_test

import (
	"testing"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// The gate of a call in a session with a workflow holds whoever proposed
// it: the agent worker's call is gated by the approval it names, any other
// call waits for the tool runner's decision, and only the gate keepers'
// requests and clearances count (ADR 0025, amendment).
func TestGateOfWhoeverProposes(t *testing.T) {
	const (
		user = "acme/mallory"
	)
	worker, runner := session.GateKeeper, session.Screener
	by := func(who string, seq uint64, data any) events.Stored {
		e := stored(t, "s", seq, data)
		e.Actor = who
		return e
	}
	start := by("acme/ana", 1, &events.SessionStarted{Workflow: "w", WorkflowRef: "blob:sha256:w"})
	ask := func(who string, seq uint64, id string) events.Stored {
		return by(who, seq, &events.ApprovalRequested{ApprovalID: id, Action: "run call", Approver: "leads", CallID: "c1", Tool: "run"})
	}
	call := func(who string, seq uint64, approval string) events.Stored {
		return by(who, seq, &events.ToolRequested{CallID: "c1", Tool: "run", Agent: "coder", ApprovalID: approval})
	}
	callerRuns := func(who string, seq uint64, approval string) events.Stored {
		return by(who, seq, &events.ToolRequested{CallID: "c1", Tool: "run", Agent: "coder", ApprovalID: approval, Runner: events.RunnerCaller})
	}
	cleared := func(who string, seq uint64) events.Stored {
		return by(who, seq, &events.ToolCleared{CallID: "c1", Tool: "run"})
	}
	grant := func(seq uint64, id string) events.Stored {
		return by("acme/lead", seq, &events.ApprovalGranted{ApprovalID: id})
	}
	tests := []struct {
		name       string
		log        []events.Stored
		unscreened bool
		approval   string
		runnable   bool
	}{
		{"the worker's ungated call", []events.Stored{start, call(worker, 2, "")}, false, "", true},
		{"the worker's gated call", []events.Stored{start, ask(worker, 2, "ap-w"), call(worker, 3, "ap-w")}, false, "ap-w", false},
		{"the worker's gated call, granted", []events.Stored{start, ask(worker, 2, "ap-w"), call(worker, 3, "ap-w"), grant(4, "ap-w")}, false, "ap-w", true},
		{"a user's call", []events.Stored{start, call(user, 2, "")}, true, "", false},
		{"a user's call naming its own granted approval", []events.Stored{start, ask(user, 2, "ap-u"), call(user, 3, "ap-u"), grant(4, "ap-u")}, true, "", false},
		{"a user's call naming the worker's approval", []events.Stored{start, ask(worker, 2, "ap-w"), grant(3, "ap-w"), call(user, 4, "ap-w")}, true, "", false},
		{"a tool server's call", []events.Stored{start, call(runner, 2, "")}, true, "", false},
		{"a user's call the user clears", []events.Stored{start, call(user, 2, ""), cleared(user, 3)}, true, "", false},
		{"a user's call the runner clears", []events.Stored{start, call(user, 2, ""), cleared(runner, 3)}, false, "", true},
		{"a user's call the runner gates", []events.Stored{start, call(user, 2, ""), ask(runner, 3, "ap-r")}, false, "ap-r", false},
		{"a user's call the runner gates, granted", []events.Stored{start, call(user, 2, ""), ask(runner, 3, "ap-r"), grant(4, "ap-r")}, false, "ap-r", true},
		{"the runner's first decision stands", []events.Stored{start, call(user, 2, ""), ask(runner, 3, "ap-r"), cleared(runner, 4)}, false, "ap-r", false},
		{"a user's approval before the runner's decision", []events.Stored{start, call(user, 2, ""), ask(user, 3, "ap-u"), grant(4, "ap-u")}, true, "", false},
		{"the call requested again after its clearance", []events.Stored{start, call(user, 2, ""), cleared(runner, 3), call(user, 4, "")}, true, "", false},
		{"the worker's call requested again by a user", []events.Stored{start, call(worker, 2, ""), call(user, 3, "")}, true, "", false},
		{"the runner's approval asked again by a user", []events.Stored{start, call(user, 2, ""), ask(runner, 3, "ap-r"), ask(user, 4, "ap-r"), grant(5, "ap-r")}, false, "ap-r", false},
		{"the worker's approval asked again by a user", []events.Stored{start, ask(worker, 2, "ap-w"), call(worker, 3, "ap-w"), ask(user, 4, "ap-w"), grant(5, "ap-w")}, false, "ap-w", false},
		{"a call its caller runs", []events.Stored{start, callerRuns(user, 2, "")}, false, "", true},
		{"a call its caller runs, naming an approval", []events.Stored{start, ask(user, 2, "ap-u"), callerRuns(user, 3, "ap-u"), grant(4, "ap-u")}, false, "", true},
		{"the worker's gated call, requested again for its caller", []events.Stored{start, ask(worker, 2, "ap-w"), call(worker, 3, "ap-w"), callerRuns(user, 4, "")}, false, "", true},
		{"no workflow: a user's call", []events.Stored{by("acme/ana", 1, &events.SessionStarted{}), call(user, 2, "")}, false, "", true},
		{"no workflow: a user's call naming an approval", []events.Stored{by("acme/ana", 1, &events.SessionStarted{}), ask(user, 2, "ap-u"), call(user, 3, "ap-u")}, false, "ap-u", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := fold(tc.log...)
			g := st.GateOf("c1")
			if g.Unscreened != tc.unscreened || g.ApprovalID != tc.approval || g.Runnable() != tc.runnable {
				t.Errorf("gate %+v (runnable %v), want unscreened %v, approval %q, runnable %v", g, g.Runnable(), tc.unscreened, tc.approval, tc.runnable)
			}
			if g.Refused() {
				t.Errorf("gate %+v refused", g)
			}
			if req := st.Call("c1"); req == nil || req.ApprovalID != tc.approval {
				t.Errorf("call %+v, want approval %q", req, tc.approval)
			}
			if tc.approval != "" && st.GatedCall(tc.approval) == nil {
				t.Errorf("approval %s gates no call", tc.approval)
			}
			for _, id := range []string{"ap-u", "ap-w", "ap-r"} {
				if id != tc.approval && st.GatedCall(id) != nil {
					t.Errorf("approval %s gates c1, whose gate is %q", id, tc.approval)
				}
			}
		})
	}
}
