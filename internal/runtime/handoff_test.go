package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/proctest"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/workflowfile"
)

// handledLine is consume's debug line for one handling of an event.
type handledLine struct {
	Msg     string `json:"msg"`
	Event   string `json:"event"`
	Type    string `json:"type"`
	Handed  bool   `json:"handed"`
	Outcome string `json:"outcome"`
}

// handlings are the agent worker's handlings of turn requests, by event
// ID: how often each was handled, how often from a hand-off, and what
// became of each hand-off it was given.
type handlings struct {
	handled, handed map[string]int
	handOffs        map[string][]string
}

// runScripted runs a scripted two-turn session to its close on a runtime of
// its own, the selector handing turns to the agent worker or not, and
// returns the session's log and the agent worker's handlings of each turn
// request (by event ID: how often, and how often from a hand-off).
func runScripted(t *testing.T, noHandOff bool) (log []events.Stored, h handlings) {
	t.Helper()
	ctx := context.Background()
	cfg := testConfig(t)
	cfg.NoHandOff = noHandOff
	sink := &proctest.LogBuffer{}
	workerLog := slog.New(slog.NewJSONHandler(sink, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rt, err := Start(ctx, cfg, WithClient("handoff-test"), WithServiceLogger(func(r auth.Role) *slog.Logger {
		if r == auth.RoleAgentWorker {
			return workerLog
		}
		return slog.New(slog.DiscardHandler)
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := rt.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}()
	rt.StartLoop()
	c, err := client.New(rt.Conn, client.WithRetryFor(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	wf, err := workflowfile.Store(ctx, c, "testdata/handoff.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// A fixed first ID: every later ID derives from it.
	if _, err := c.Start(ctx, "s1", events.SessionStarted{Workflow: wf.Name, WorkflowHash: wf.Hash, WorkflowRef: wf.Ref},
		events.WithID("handoff-start")); err != nil {
		t.Fatal(err)
	}
	testrig.WaitFor(t, c, "s1", events.TypeSessionClosed)
	if log, err = c.Log(ctx, "s1", client.Range{From: 1}); err != nil {
		t.Fatal(err)
	}
	// The worker's deliveries of the requests are acked before the session
	// closes (a request is handled before its answer is appended), but a
	// hand-off's delivery may come after: stop first, so that every line
	// is written.
	if err := rt.StopLoop(); err != nil {
		t.Fatal(err)
	}
	h = handlings{handled: map[string]int{}, handed: map[string]int{}, handOffs: map[string][]string{}}
	for line := range strings.Lines(sink.String()) {
		var l handledLine
		if err := json.Unmarshal([]byte(line), &l); err != nil || l.Type != events.TypeTurnRequested {
			continue
		}
		switch l.Msg {
		case "handled":
			h.handled[l.Event]++
			if l.Handed {
				h.handed[l.Event]++
			}
		case "hand-off":
			h.handOffs[l.Event] = append(h.handOffs[l.Event], l.Outcome)
		}
	}
	return log, h
}

// comparable is what must be the same of an event in both shapes: all but
// its time, hash chain and signature (which cover the time), and the
// timings in its data.
func comparable(t *testing.T, ev events.Stored) string {
	t.Helper()
	var data map[string]any
	if len(ev.Data) > 0 {
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"latency_ms", "duration_ms"} {
		delete(data, k)
	}
	d, _ := json.Marshal(data)
	return fmt.Sprintf("%d %s %s src=%s cause=%s corr=%s actor=%s for=%s data=%s",
		ev.Seq, ev.Type, ev.ID, ev.Source, ev.Causation, ev.Correlation, ev.Actor, ev.OnBehalf, d)
}

// The same scripted session leaves the same log, event for event, whether
// the selector hands its turn requests to the agent worker in the process
// or the worker takes them from JetStream only; either way the worker
// handles each request once. With the hand-off, each request is handed
// (queued, or dropped when its delivery came first: which one wins is a
// race, so the test asserts neither).
func TestHandOffLeavesTheSameLog(t *testing.T) {
	apart, apartH := runScripted(t, true)
	local, localH := runScripted(t, false)
	if len(apart) != len(local) {
		t.Errorf("%d events apart, %d with the hand-off", len(apart), len(local))
	}
	for i := range min(len(apart), len(local)) {
		if a, l := comparable(t, apart[i]), comparable(t, local[i]); a != l {
			t.Errorf("event %d:\napart:      %s\nhanded off: %s", i+1, a, l)
		}
	}
	requests := 0
	for _, ev := range local {
		if ev.Type != events.TypeTurnRequested {
			continue
		}
		requests++
		if apartH.handled[ev.ID] != 1 || localH.handled[ev.ID] != 1 {
			t.Errorf("request %s handled %d times apart, %d with the hand-off; want once each", ev.ID, apartH.handled[ev.ID], localH.handled[ev.ID])
		}
		if n := len(localH.handOffs[ev.ID]); n != 1 {
			t.Errorf("request %s handed off %d times, want once", ev.ID, n)
		}
		t.Logf("request %s: hand-off %v, handled from it %d times", ev.ID, localH.handOffs[ev.ID], localH.handed[ev.ID])
	}
	if requests != 2 {
		t.Fatalf("%d turn requests, want 2", requests)
	}
	if len(apartH.handOffs) != 0 || len(apartH.handed) != 0 {
		t.Errorf("handed off apart: %v", apartH.handOffs)
	}
}
