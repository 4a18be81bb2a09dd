package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// longTurns is how many turns the long session takes: each reads a file of
// longResultBytes, so the session holds longTurns tool results of that size.
const (
	longTurns       = 300
	longResultBytes = 15 << 10 // under the 16 KiB inline limit of a tool result
)

// TestLongSessionOfLargeToolResultsCloses is issue 11's long session scaled
// for CI: an agent runs a command printing 15 KiB in each of 300 turns (about
// 4.5 MB of tool results), its context is compacted on the way, and the session closes
// when a rule sees the 300th turn's tool result. Every turn is a whole answer: text, tool
// request, model call and turn end stored together.
func TestLongSessionOfLargeToolResultsCloses(t *testing.T) {
	if testing.Short() {
		t.Skip("a 300-turn session: run without -short")
	}
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("long.yaml", fmt.Sprintf(`name: long-reads
agents:
  - name: reader
    provider: scripted
    model: scripted-1
    system: You print the file again.
    tools: [run]
    script: reader.yaml
rules:
  - name: enough
    when: event.type == "rath.tool.call.completed" && state.turns >= %d
    route: {close: {outcome: succeeded, reason: read it %d times}}
  - name: start
    when: event.type == "rath.session.started"
    route: {agent: reader}
compaction:
  max_context_tokens: 200000
  keep_last: 4
budgets:
  max_turns: %d
`, longTurns, longTurns, longTurns+20))
	// Every turn asks for the same output: after a compaction the scripted
	// model counts fewer of its own messages and answers from an earlier
	// position, which is the same answer.
	var script strings.Builder
	for range longTurns + 20 {
		fmt.Fprintf(&script, "- content: Printing the file.\n  tool_calls:\n    - name: run\n      arguments: {command: [sh, -c, 'yes 0123456789abcde | head -c %d']}\n", longResultBytes)
	}
	write("reader.yaml", script.String())

	p := startInProcess(t)
	start := p.uploadWorkflowAt(t, filepath.Join(dir, "long.yaml"))
	p.runWorker(t)
	p.startSessions(t, start, []string{"long"})
	p.mustClose(t, []string{"long"}, 10*time.Minute)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ov, err := p.c.Overview(ctx, api.StateRequest{Session: "long"})
	if err != nil {
		t.Fatal(err)
	}
	log := p.readLog(t, "long")
	if ov.Status != session.StatusClosed || ov.Outcome != "succeeded" {
		t.Fatalf("session ended %s/%s, want closed/succeeded", ov.Status, ov.Outcome)
	}
	var compactions, results, turns int
	for _, ev := range log {
		switch ev.Type {
		case events.TypeTranscriptCompacted:
			compactions++
		case events.TypeToolCompleted:
			results++
		case events.TypeTurnCompleted:
			turns++
		}
	}
	if turns != longTurns || results != longTurns || compactions == 0 {
		t.Fatalf("%d turns, %d tool results, %d compactions: want %d of each and a compaction", turns, results, compactions, longTurns)
	}
	// Every turn's answer is whole and contiguous in the log.
	for _, wt := range workerTurns(t, log) {
		var kinds []string
		for _, e := range wt.evs {
			kinds = append(kinds, e.what)
		}
		got := strings.Join(kinds, ",")
		if got != "chunk,tool-0,model,completed" && got != "compacted,chunk,tool-0,model,completed" {
			t.Fatalf("turn %s stored %s", wt.turnID, got)
		}
		for i := 1; i < len(wt.evs); i++ {
			if wt.evs[i].ev.Seq != wt.evs[i-1].ev.Seq+1 {
				t.Fatalf("turn %s's answer is not contiguous: %s at %d after %d", wt.turnID, wt.evs[i].what, wt.evs[i].ev.Seq, wt.evs[i-1].ev.Seq)
			}
		}
	}
	if bad := p.checkChain(t, "long", log); len(bad) > 0 {
		t.Fatalf("chain: %v", bad)
	}
}
