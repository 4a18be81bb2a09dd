package runner

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// A tool call retried under overload is redelivered to a second runner
// while the first runner's placement is still on its way to the ledger:
// the second reads the session without it, places a workspace of its own,
// and then the first's placement is stored. The session must still show
// one placement, and the second runner hand the call over to the first.
func TestPlacementRecordedOnceWhenRetriedElsewhere(t *testing.T) {
	ns, nc := natstest.Start(t)
	testrig.Ledger(t, ns.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tnc := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleToolRunner)
	store, err := eventstore.AttachWait(ctx, tnc)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := client.New(tnc, client.As(events.Service("tool-runner")), client.WithSource(Source))
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	runnerAt := func(root string) (*Runner, string) {
		t.Helper()
		cfg := sandbox.DefaultConfig()
		cfg.Root, cfg.Path = root, os.Getenv("PATH")
		l, err := sandbox.NewLocal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		bs, err := NewBackends(events.BackendLocal, map[string]Backend{
			events.BackendLocal: {Local: l, Isolation: func(string) string { return events.IsolationNone }},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, abs := l.Location()
		return New(rc, fold.NewCache(store, fold.CacheConfig{}), store, bs, workflow.NewLibrary(store.GetBlob), nil, quiet), abs
	}
	first, firstRoot := runnerAt(t.TempDir())
	second, _ := runnerAt(t.TempDir())

	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(ctx, "s", events.SessionStarted{}); err != nil {
		t.Fatal(err)
	}
	req := &events.ToolRequested{CallID: "c1", Tool: "list_files", Agent: "a", Arguments: []byte(`{}`)}
	ack, err := c.Emit(ctx, "s", req)
	if err != nil {
		t.Fatal(err)
	}
	log, err := c.Log(ctx, "s", client.Range{From: ack.Seq, To: ack.Seq})
	if err != nil || len(log) != 1 {
		t.Fatalf("the request: %v (%d events)", err, len(log))
	}
	ev := log[0]

	// The second runner's delivery reads the session before the first
	// runner's placement is stored.
	seen, err := second.states.StateSince(ctx, "s", ev.Seq)
	if err != nil {
		t.Fatal(err)
	}
	st, err := first.states.StateSince(ctx, "s", ev.Seq)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := first.place(ctx, st, ev, req, false)
	if err != nil {
		t.Fatalf("first runner: %v", err)
	}
	_, err = second.place(ctx, seen, ev, req, false)
	var away *elsewhere
	if !errors.As(err, &away) || away.root != firstRoot {
		t.Errorf("second runner: %v, want the call handed over to the first runner's %s", err, firstRoot)
	}

	log, err = c.Log(ctx, "s", client.Range{From: 1})
	if err != nil {
		t.Fatal(err)
	}
	var placed []string
	for _, e := range log {
		if e.Type == events.TypeSandboxPlaced {
			d, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			placed = append(placed, d.(*events.SandboxPlaced).Workspace)
		}
	}
	if len(placed) != 1 || placed[0] != ws.Dir() {
		t.Fatalf("placements %q, want one, the first runner's %s", placed, ws.Dir())
	}

	// The call delivered again to the first runner finds its workspace.
	st, err = first.states.StateSince(ctx, "s", ev.Seq)
	if err != nil {
		t.Fatal(err)
	}
	again, err := first.place(ctx, st, ev, req, false)
	if err != nil || again.Dir() != ws.Dir() {
		t.Fatalf("first runner again: %v, %v; want %s", again, err, ws.Dir())
	}
}
