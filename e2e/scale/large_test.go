package e2e_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// TestNineLargeChunksStillGetTurns is issue 11's case: a client appends nine
// 1 MB chunks (9 MB, above the server's 8 MiB message limit) to a session
// before any agent worker runs. The state operation still answers, and the
// agent loop still works the session to its close: the workers fold it
// themselves (ADR 0016) and never ask for a reply as large as the session.
func TestNineLargeChunksStillGetTurns(t *testing.T) {
	p := startInProcess(t)
	start := p.uploadWorkflow(t, "scale.yaml")
	p.startSessions(t, start, []string{"large"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var last uint64
	for i := range 9 {
		a, err := p.c.Emit(ctx, "large", &events.ChunkAppended{Role: events.RoleUser, Content: strings.Repeat(string(rune('a'+i)), 1_000_000)})
		if err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		last = a.Seq
	}
	ov, err := p.c.Overview(ctx, api.StateRequest{Session: "large"})
	if err != nil {
		t.Fatalf("state of a session of 9 MB of chunks: %v", err)
	}
	if b, _ := json.Marshal(ov); ov.Chunks.Count < 9 || ov.Chunks.Bytes < 9_000_000 || len(b) > 32<<10 {
		t.Fatalf("overview: %d chunks, %d bytes of them, %d bytes of JSON", ov.Chunks.Count, ov.Chunks.Bytes, len(b))
	}

	// Only now does an agent worker run: every turn it takes is on a state
	// holding the nine chunks.
	p.runWorker(t)
	p.mustClose(t, []string{"large"}, 45*time.Second)
	ov, err = p.c.Overview(ctx, api.StateRequest{Session: "large"})
	if err != nil {
		t.Fatal(err)
	}
	if ov.Status != session.StatusClosed || ov.Outcome != "succeeded" || ov.Counts.Turns < 2 {
		t.Fatalf("closed %s %s after %d turns, want succeeded after 2", ov.Status, ov.Outcome, ov.Counts.Turns)
	}
	turns := 0
	for _, ev := range p.readLog(t, "large") {
		if ev.Type == events.TypeTurnCompleted && ev.Seq > last {
			turns++
		}
	}
	if turns < 2 {
		t.Fatalf("%d turns completed after the last large chunk (seq %d), want the planner's and the worker's", turns, last)
	}
}
