package cluster_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/clustercheck"
	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/session"
)

// CI-sized by default (each case well under a minute on two cores); the
// issue's full scale is -cluster.proc.events 5000 -cluster.proc.sessions
// 100 -cluster.agents 20.
var (
	procEvents   = flag.Int("cluster.proc.events", 1200, "appends over all sessions in the process cases (session starts included)")
	procSessions = flag.Int("cluster.proc.sessions", 40, "sessions appended to concurrently in the process cases")
	numAgents    = flag.Int("cluster.agents", 6, "scripted agent sessions run alongside the appends in the process cases")
	pauseFor     = flag.Duration("cluster.pause", 10*time.Second, "how long the SIGSTOP case keeps the leader stopped, at most (it resumes it once two thirds of the appends are acknowledged): longer than JetStream's election timeout (4-9 s), so that a new leader is elected while the old one is stopped")
)

// The cluster's nodes are nats-server processes, lost as a machine loses
// them: the node leading RATH_SESSIONS is killed with SIGKILL and restarted
// on its store, or stopped with SIGSTOP and resumed with SIGCONT. Two
// ledgers and the agent loop (memory, selector, agent worker, tool runner)
// run on the cluster with R3 streams while a client appends and scripted
// agent sessions run; nothing acknowledged may be lost or stored twice,
// every chain must verify and every agent session must close.
func TestClusterProcessesLoseNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: two 3-node clusters of nats-server processes, each losing its leader, about a minute here")
	}
	t.Run("kill-9", func(t *testing.T) {
		c := natstest.StartClusterProcesses(t, 3)
		runLoss(t, c, loss{
			what:     "killed with SIGKILL",
			sessions: *procSessions,
			events:   *procEvents,
			lose:     c.Kill,
			back:     func(i int) { c.Restart(i) },
			agents:   *numAgents,
		})
	})
	t.Run("sigstop", func(t *testing.T) {
		c := natstest.StartClusterProcesses(t, 3)
		runLoss(t, c, loss{
			what:      "stopped with SIGSTOP",
			sessions:  *procSessions,
			events:    *procEvents,
			lose:      c.Pause,
			back:      c.Resume,
			backAfter: *pauseFor,
			agents:    *numAgents,
		})
	})
}

// agentRun is the agent loop on a cluster and the scripted agent sessions
// started on it.
type agentRun struct {
	rt    *runtime.Runtime
	cl    *client.Client
	rec   *clustercheck.Recorder
	first events.SessionStarted // every session's start, but for its task
	ids   []string

	wg   sync.WaitGroup // the starts in flight
	errs chan error
}

// startAgents runs the memory service and the agent loop (selector, agent
// worker, tool runner with the local backend) on the cluster, through
// internal/runtime as rath up runs them against a server it names, and
// stores the scale tests' workflow (a planner, a worker running one
// command, about 23 events a session) for n sessions.
func startAgents(ctx context.Context, t *testing.T, c *natstest.Cluster, cl *client.Client, rec *clustercheck.Recorder, log *slog.Logger, n int) *agentRun {
	t.Helper()
	seeds, err := filepath.Abs(filepath.Join("..", "scale", "testdata", "scale"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := runtime.DefaultConfig()
	cfg.NATSURL, cfg.CredsDir, cfg.Data = c.URL(), natstest.CredsDir(t, c.URL()), t.TempDir()
	cfg.Ledger.Store.Replicas = 3 // the memory service's stream too
	cfg.ToolRunner.Backend = events.BackendLocal
	cfg.ToolRunner.Sandbox.Root = t.TempDir()
	rt, err := runtime.Start(ctx, cfg, runtime.WithLogger(log),
		runtime.WithRoles(auth.RoleMemory, auth.RoleSelector, auth.RoleAgentWorker, auth.RoleToolRunner))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Stop(); err != nil {
			t.Errorf("agent loop: %v", err)
		}
		refused := 0
		for _, err := range rt.Violations() {
			// As a ledger's (lateReplies): a service that reconnected
			// to another node may not answer what it was asked before.
			if strings.Contains(err.Error(), `Publish to "_INBOX.`) {
				refused++
				continue
			}
			t.Errorf("permission violation: %v", err)
		}
		if refused > 0 {
			t.Logf("%d replies of the memory service or the agent loop refused after a reconnect", refused)
		}
	})
	rt.StartLoop()
	wf, err := workflow.Load(filepath.Join(seeds, "scale.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := workflow.Store(ctx, wf, cl.PutBlob)
	if err != nil {
		t.Fatalf("store workflow %s: %v", wf.Name, err)
	}
	first := events.SessionStarted{Workflow: wf.Name, WorkflowHash: wf.Hash(), WorkflowRef: ref}
	if err := cl.SeedWorkspace(ctx, filepath.Join(seeds, "repo"), &first); err != nil {
		t.Fatal(err)
	}
	a := &agentRun{rt: rt, cl: cl, rec: rec, errs: make(chan error, n), first: first}
	for i := range n {
		a.ids = append(a.ids, fmt.Sprintf("ag-%02d", i))
	}
	return a
}

// start starts the agent sessions ids[from:to] in the background, each
// start's ack recorded for clustercheck.
func (a *agentRun) start(ctx context.Context, t *testing.T, from, to int) {
	for _, id := range a.ids[from:to] {
		a.wg.Go(func() {
			st := a.first
			st.Task = "cluster agent " + id
			ack, err := a.cl.Start(ctx, id, st)
			if err != nil {
				a.errs <- fmt.Errorf("start agent session %s: %w", id, err)
				return
			}
			a.rec.Acked(ack)
		})
	}
}

// waitClosed waits until every agent session is closed (within two
// minutes), failing the test for one that did not close or did not
// succeed.
func (a *agentRun) waitClosed(ctx context.Context, t *testing.T) {
	t.Helper()
	a.wg.Wait()
	close(a.errs)
	for err := range a.errs {
		t.Fatal(err)
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	open := a.ids
	states := map[string]*session.State{}
	last := ""
	for len(open) > 0 {
		var still []string
		for _, id := range open {
			st, err := a.cl.State(ctx, id)
			if err != nil && ctx.Err() == nil {
				t.Logf("state of %s: %v (asking again)", id, err)
			}
			if err == nil && st.Status.Ended() {
				states[id] = st
				last = id
				continue
			}
			still = append(still, id)
		}
		open = still
		if len(open) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("agent sessions not closed %s after the appends ended: %v", time.Since(began).Round(time.Second), open)
		case <-a.rt.Done():
			t.Fatalf("the agent loop stopped with agent sessions open (%v): %v", open, a.rt.StopLoop())
		case <-tick.C:
		}
	}
	outcomes := map[string]int{}
	var failed []error
	for _, id := range a.ids {
		st := states[id]
		outcomes[st.Outcome]++
		if st.Outcome != "succeeded" {
			failed = append(failed, fmt.Errorf("agent session %s closed %s: %s", id, st.Outcome, st.CloseReason))
		}
	}
	t.Logf("%d agent sessions closed (outcomes %v), the last %s after the appends ended", len(a.ids), outcomes, time.Since(began).Round(time.Millisecond))
	a.longestWait(ctx, t, last)
	if err := errors.Join(failed...); err != nil {
		t.Fatal(err)
	}
}

// longestWait logs where the agent session that closed last waited longest:
// the two events of its log furthest apart in time, and who proposed each,
// which names the step (and the service) a tail after a node's loss is in.
func (a *agentRun) longestWait(ctx context.Context, t *testing.T, id string) {
	t.Helper()
	if id == "" {
		return
	}
	evs, err := a.cl.Log(ctx, id, client.Range{From: 1})
	if err != nil {
		t.Logf("log of %s: %v", id, err)
		return
	}
	var gap time.Duration
	at := 0
	for i := 1; i < len(evs); i++ {
		if d := evs[i].Time.Sub(evs[i-1].Time); d > gap {
			gap, at = d, i
		}
	}
	if at == 0 {
		return
	}
	before, after := evs[at-1], evs[at]
	t.Logf("the agent session that closed last, %s, waited longest (%s) between %d %s (%s, %s) and %d %s (%s, %s)", id, gap.Round(time.Millisecond),
		before.Seq, before.Type, before.Source, before.Time.Format("15:04:05.000"), after.Seq, after.Type, after.Source, after.Time.Format("15:04:05.000"))
}
