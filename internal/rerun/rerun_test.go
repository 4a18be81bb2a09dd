package rerun

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/replay"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

func stored(t *testing.T, session string, seq uint64, data any) events.Stored {
	t.Helper()
	k, ok := events.KindOf(data)
	if !ok {
		t.Fatalf("%T is not an event kind", data)
	}
	raw, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	return events.Stored{ID: events.NewID(), Type: k.Type, Session: session, Seq: seq, Time: time.Unix(int64(seq), 0), Data: raw}
}

// twoTurns is a session's log of two agents' turns, one after the other:
// between turns at 1, 4 and 7; an agent's turn follows 1 and 4.
func twoTurns(t *testing.T) []events.Stored {
	return []events.Stored{
		stored(t, "s", 1, &events.SessionStarted{Task: "t"}),
		stored(t, "s", 2, &events.SelectorDecided{Rule: "start", Route: "agent:a", Agent: "a", TurnID: "t1"}),
		stored(t, "s", 3, &events.TurnRequested{TurnID: "t1", Agent: "a"}),
		stored(t, "s", 4, &events.TurnCompleted{TurnID: "t1", Agent: "a"}),
		stored(t, "s", 5, &events.SelectorDecided{Rule: "next", Route: "agent:b", Agent: "b", TurnID: "t2"}),
		stored(t, "s", 6, &events.TurnRequested{TurnID: "t2", Agent: "b"}),
		stored(t, "s", 7, &events.TurnCompleted{TurnID: "t2", Agent: "b"}),
	}
}

func TestNextBoundary(t *testing.T) {
	log := twoTurns(t)
	for _, c := range []struct {
		from   uint64
		before bool
		want   uint64
	}{
		{3, false, 4}, {3, true, 1}, {2, false, 4}, {6, true, 4}, {6, false, 0}, {1, true, 0},
	} {
		if got := nextBoundary(log, c.from, c.before); got != c.want {
			t.Errorf("nextBoundary(%d, before %v) = %d, want %d", c.from, c.before, got, c.want)
		}
	}
	if got := suggestFrom(log, 3); got != ": use --from 1 or --from 4" {
		t.Errorf("suggestFrom(3) = %q", got)
	}
	if got := suggestFrom(log[:1], 1); got != "" {
		t.Errorf("suggestFrom with no turn = %q, want nothing", got)
	}
}

func TestNewestChild(t *testing.T) {
	g := &api.Node{Session: "r", Children: []*api.Node{
		{Session: "f1", Children: []*api.Node{{Session: "f1a"}, {Session: "f1b"}}},
		{Session: "f2"},
	}}
	for id, want := range map[string]string{"r": "f2", "f1": "f1b", "f2": "", "f1b": "", "nowhere": ""} {
		if got := newestChild(g, id); got != want {
			t.Errorf("newestChild(%s) = %q, want %q", id, got, want)
		}
	}
}

func TestFirstBackend(t *testing.T) {
	tree, err := replay.NewTree(map[string][]events.Stored{"r": {
		stored(t, "r", 1, &events.SessionStarted{Task: "t"}),
		stored(t, "r", 2, &events.SandboxPlaced{Backend: events.BackendBwrap, SandboxID: "x"}),
		stored(t, "r", 3, &events.SandboxPlaced{Backend: events.BackendLocal, SandboxID: "y"}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := firstBackend(tree); got != events.BackendBwrap {
		t.Errorf("firstBackend = %q, want the first placement's", got)
	}
}

func TestUsageErrors(t *testing.T) {
	err := usageError{errors.New("bad")}
	if !errors.Is(err, ErrUsage) || err.Error() != "bad" {
		t.Errorf("usageError: %v, Is(ErrUsage) %v", err, errors.Is(err, ErrUsage))
	}
	nc := &NotClosedError{Session: "s", Fork: "f", Err: errors.New("deadline")}
	if !strings.Contains(nc.Error(), "what-if fork f of s: not closed") || errors.Unwrap(nc).Error() != "deadline" {
		t.Errorf("NotClosedError: %v", nc)
	}
}
