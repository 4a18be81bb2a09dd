package runtime

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/workflowfile"
)

// The services of one runtime fold sessions in one cache (ADR 0038): the
// selector, the agent worker, the tool runner and the memory service each
// handle every session at their own sequences, and the shared cache, fed by
// all of their consumers, holds each session once, starts it from its
// first event and folds nothing anew.
func TestServicesShareOneCache(t *testing.T) {
	ctx := context.Background()
	rt, err := Start(ctx, testConfig(t), WithClient("runtime-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Stop()
	rt.StartLoop()
	c, err := client.New(rt.Conn, client.WithRetryFor(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	wf, err := workflowfile.Store(ctx, c, "testdata/share.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const sessions = 3
	for i := range sessions {
		id := fmt.Sprintf("s%d", i)
		if _, err := c.Start(ctx, id, events.SessionStarted{Task: "look around", Workflow: wf.Name, WorkflowHash: wf.Hash, WorkflowRef: wf.Ref}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range sessions {
		id := fmt.Sprintf("s%d", i)
		closed := testrig.WaitFor(t, c, id, events.TypeSessionClosed)
		d, err := closed.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if sc := d.(*events.SessionClosed); sc.Outcome != "succeeded" {
			t.Errorf("session %s closed %+v, want succeeded", id, sc)
		}
		st, err := c.State(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Tools) == 0 {
			t.Errorf("session %s: no tool call, want the researcher's", id)
		}
	}
	states := rt.States()
	if states == nil {
		t.Fatal("no shared cache made")
	}
	given := rt.states.given()
	slices.Sort(given)
	if want := []auth.Role{auth.RoleAgentWorker, auth.RoleMemory, auth.RoleSelector, auth.RoleToolRunner}; !slices.Equal(given, want) {
		t.Errorf("the shared cache was given to %v, want %v", given, want)
	}
	st := states.Stats()
	t.Logf("shared cache after %d sessions: %+v", sessions, st)
	if st.Sessions != sessions || st.Refolds != 0 || st.Loads != 0 {
		t.Errorf("shared cache after %d sessions: %+v, want each session held once, fed from its start: no load, no refold", sessions, st)
	}
	if err := rt.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	for _, err := range rt.Violations() {
		t.Errorf("permission violation: %v", err)
	}
}

// The shared cache's bound is checked with the rest of the configuration:
// a negative or absurd one is refused, naming the flag; 0 is the default.
func TestStateCacheBytesChecked(t *testing.T) {
	for _, tc := range []struct {
		bytes int64
		ok    bool
	}{
		{0, true}, {1, true}, {64 << 20, true}, {MaxStateCacheBytes, true},
		{-1, false}, {-(1 << 62), false}, {MaxStateCacheBytes + 1, false}, {1<<63 - 1, false},
	} {
		cfg := DefaultConfig()
		cfg.StateCacheBytes = tc.bytes
		err := cfg.Validate()
		if tc.ok && err != nil {
			t.Errorf("--state-cache-bytes %d: %v, want it accepted", tc.bytes, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "--state-cache-bytes")) {
			t.Errorf("--state-cache-bytes %d: %v, want it refused, naming the flag", tc.bytes, err)
		}
	}
	if got := DefaultConfig().StateCache(); got.MaxBytes != fold.DefaultMaxBytes || !got.Shared {
		t.Errorf("default state cache %+v, want fold.DefaultMaxBytes, shared", got)
	}
}
