package rerun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/replay"
	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/memoryapi"
)

// Report is what a re-execution found: rath replay prints it, as JSON with
// --json.
type Report struct {
	Original   string `json:"original"`
	Replay     string `json:"replay"`
	Reproduced bool   `json:"reproduced"`
	Finished   bool   `json:"finished"`
	Workflow   string `json:"workflow,omitempty"`
	Events     int    `json:"events"`
	replay.Result
	External []ExternalInput `json:"external_inputs"`
	// Seeded are the memory items the original recalled without writing
	// them in its tree, written into the private memory before the run.
	Seeded []SeededItem `json:"seeded_memory"`
}

// SeededItem is a memory item written into the private memory before the
// run.
type SeededItem struct {
	ItemID   string `json:"item_id"`
	Versions int    `json:"versions"`
	// From says where their content came from: "history" (the original's
	// memory service) or "recall" (the recall events alone).
	From string `json:"from"`
}

// ExternalInput is an input of the original from outside its services (a
// user's memory note, an emitted event, a pause) and whether the replay
// applied it again.
type ExternalInput struct {
	Branch  string `json:"branch"`
	Seq     uint64 `json:"seq"`
	Type    string `json:"type"`
	Applied bool   `json:"applied"`
	Error   string `json:"error,omitempty"`
}

// Options configure Reexecute.
type Options struct {
	// Workflow replaces the recorded workflow bundle (and its scripts);
	// WorkflowFile names it in the report.
	Workflow     *workflow.Workflow
	WorkflowFile string
	// Data holds the private runtime's storage, workspaces and services'
	// log (rath.log); "" makes a temporary directory, removed at the end
	// unless KeepData.
	Data     string
	KeepData bool
	// Wait and Idle stop the run (and compare what it did) after that long,
	// or when no event arrived for that long.
	Wait, Idle time.Duration
	// Runtime is the private runtime's configuration before it is placed
	// under Data (runtime.Config.Private): rath passes rath up's defaults
	// with the model keys of its environment.
	Runtime runtime.Config
	// Progress receives a line for people at each step (nil: none).
	Progress io.Writer
}

// Reexecute runs the original tree again in a private runtime and compares
// the two trees: a new root session with the original's start, the tool
// runner on the original's first backend, live-model agents answering from
// the original's recorded answers, and the original's external inputs
// applied again where they were. The original's client c supplies its
// workflow bundle and the memory items it recalled without writing them.
func Reexecute(ctx context.Context, c *client.Client, orig *replay.Tree, o Options) (*Report, error) {
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	first := orig.Root.Events[0]
	d, err := first.Decode()
	if err != nil {
		return nil, fmt.Errorf("replay: start of %s: %w", orig.Root.ID, err)
	}
	start := *d.(*events.SessionStarted)
	data := o.Data
	if data == "" {
		if data, err = os.MkdirTemp("", "rath-replay-"); err != nil {
			return nil, fmt.Errorf("replay data directory: %w", err)
		}
		if !o.KeepData {
			defer os.RemoveAll(data)
		}
	}
	if err := refuseServed(ctx, c, o.Workflow, start.WorkflowRef); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(data, "rath.log"))
	if err != nil {
		return nil, fmt.Errorf("replay log: %w", err)
	}
	defer logFile.Close()
	log := slog.New(slog.NewTextHandler(logFile, nil))

	cfg := o.Runtime.Private(data)
	cfg.Ledger.Ledger.Name = fmt.Sprintf("rath-replay-%d", os.Getpid())
	cfg.Worker.Recorded = orig.Stored()
	if b := firstBackend(orig); b != "" {
		// Tools run again where they ran: the original's first placement
		// is on the backend its workflow asked for, or its runner's
		// default, which the private runner takes for its own.
		cfg.ToolRunner.Backend = b
	}
	rt, err := runtime.Start(ctx, cfg, runtime.WithClient("rath-replay"), runtime.WithLogger(log))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := rt.Stop(); err != nil {
			log.Error("services stopped with an error", "err", err)
		}
	}()
	fmt.Fprintf(progress, "rath replay: private runtime up (NATS %s, data %s, services' log %s)\n", rt.URL, data, logFile.Name())

	rc, err := client.New(rt.Conn, client.WithRetryFor(30*time.Second), client.WithSource(Source))
	if err != nil {
		return nil, err
	}
	// The private ledger's answer (rc retries while none listens) says it is up.
	if _, err := rc.Keys(ctx); err != nil {
		return nil, fmt.Errorf("replay: wait for the private ledger: %w", err)
	}
	rep := &Report{Original: orig.Root.ID, Workflow: start.WorkflowRef}
	if o.Workflow != nil {
		if err := upload(ctx, rc, o.Workflow, &start); err != nil {
			return nil, err
		}
		rep.Workflow = o.WorkflowFile + " (" + start.WorkflowRef + ")"
	} else if start.WorkflowRef != "" {
		if err := copyBlob(ctx, c, rc, "workflow bundle", start.WorkflowRef); err != nil {
			return nil, err
		}
	}
	// A fork that runs a changed workflow (a counterfactual, rath recheck)
	// is made again on the same bundle.
	for _, b := range orig.Branches {
		if b.Parent == nil || len(b.Events) == 0 || b.Events[0].Type != events.TypeSessionForked {
			continue
		}
		var f events.SessionForked
		if json.Unmarshal(b.Events[0].Data, &f) == nil && f.WorkflowRef != "" {
			if err := copyBlob(ctx, c, rc, "workflow bundle", f.WorkflowRef); err != nil {
				return nil, err
			}
		}
	}
	// The workspace seed is content too (ADR 0031): the replay's runner
	// unpacks the very bytes the original's did.
	if ref := start.Labels[client.LabelWorkspace]; ref != "" {
		if err := copyBlob(ctx, c, rc, "workspace seed", ref); err != nil {
			return nil, err
		}
	}

	r := newRun(orig, rc)
	sub, err := rt.Conn.Subscribe(events.TenantLiveWildcard(events.DefaultTenant), func(m *nats.Msg) {
		if ev, err := events.ParseStored(m.Data); err == nil {
			r.arrived <- ev
		}
	})
	if err != nil {
		return nil, fmt.Errorf("replay: follow events: %w", err)
	}
	defer sub.Unsubscribe()
	if err := rt.Conn.Flush(); err != nil {
		return nil, fmt.Errorf("replay: follow events: %w", err)
	}

	ack, err := rc.Start(ctx, "", start, events.WithSource(first.Source))
	if err != nil {
		return nil, fmt.Errorf("replay: start session: %w", err)
	}
	rep.Replay = ack.Session
	r.started(ack)
	fmt.Fprintf(progress, "rath replay: replaying %s as %s\n", orig.Root.ID, ack.Session)
	// The inputs right after the start go in before the agent loop runs,
	// so they land where they did in the original; so do the memory items
	// the original recalled but did not write.
	if err := r.applyReady(ctx, orig.Root, 1); err != nil {
		return nil, err
	}
	if err := r.forkReady(ctx, orig.Root, 1); err != nil {
		return nil, err
	}
	if rep.Seeded, err = seedRecalled(ctx, c, rc, orig); err != nil {
		return nil, err
	}
	rt.StartLoop()

	rep.Finished = r.follow(ctx, o.Wait, o.Idle)
	_ = rt.StopLoop() // nothing appends any more: the tree read is the end state
	repl, err := replay.Read(ctx, rc, ack.Session)
	if err != nil {
		return nil, err
	}
	rep.Result = replay.Compare(orig, repl, replay.Options{Finished: rep.Finished})
	rep.Events = orig.Events()
	rep.Reproduced = rep.First == nil
	rep.External = r.report()
	return rep, nil
}

// copyBlob copies a blob (what: a workflow bundle, a workspace seed) from
// the original's runtime.
func copyBlob(ctx context.Context, from, to *client.Client, what, ref string) error {
	raw, err := from.GetBlob(ctx, ref)
	if err != nil {
		return fmt.Errorf("replay: %s %s: %w", what, ref, err)
	}
	got, err := to.PutBlob(ctx, raw)
	if err != nil {
		return fmt.Errorf("replay: copy %s: %w", what, err)
	}
	if got != ref {
		return fmt.Errorf("replay: %s %s stored as %s", what, ref, got)
	}
	return nil
}

// refuseServed refuses a re-execution of a workflow that has agents or
// routers programs serve (pkg/agentserver): the private runtime runs
// Rath's own services only, so their turns and routes would wait until the
// run's --wait or --idle and be reported as a divergence that is not one
// (ADR 0029).
func refuseServed(ctx context.Context, c *client.Client, wf *workflow.Workflow, ref string) error {
	if wf == nil && ref != "" {
		raw, err := c.GetBlob(ctx, ref)
		if err != nil {
			return fmt.Errorf("replay: workflow bundle %s: %w", ref, err)
		}
		if wf, _, err = workflow.OpenBundle(raw); err != nil {
			return fmt.Errorf("replay: workflow bundle %s: %w", ref, err)
		}
	}
	if wf == nil {
		return nil
	}
	var served []string
	for _, a := range wf.Agents {
		if a.Served {
			served = append(served, "agent "+a.Name)
		}
	}
	for _, r := range wf.Rules {
		if r.Route.Router != "" {
			served = append(served, "router "+r.Route.Router+" (rule "+r.Name+")")
		}
	}
	if len(served) == 0 {
		return nil
	}
	return usageError{fmt.Errorf("replay: workflow %s has parts that programs serve (%s): a replay runs Rath's own services in a private runtime, where no program serves them, so their turns and routes would never be answered (ADR 0029). "+
		"The record is evidence as it is (rath verify, rath audit, the dossier); a what-if (--from N --fork) runs in the live deployment, where the programs serve them",
		wf.Name, strings.Join(served, ", "))}
}

// upload stores a workflow with its scripts as one bundle and names it in
// the session start.
func upload(ctx context.Context, c *client.Client, wf *workflow.Workflow, data *events.SessionStarted) error {
	ref, err := workflow.Store(ctx, wf, c.PutBlob)
	if errors.Is(err, workflow.ErrBundle) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	data.Workflow, data.WorkflowHash, data.WorkflowRef = wf.Name, wf.Hash(), ref
	return nil
}

// seedRecalled writes into the private memory the items the original
// recalled that its tree did not write (notes that were in the original's
// memory before the session): every version up to the last one recalled,
// as the original's memory service keeps their history, or, when it does
// not answer, the content the recall events recorded. They are written in
// a session of their own, outside the replayed tree, so a re-executed
// recall finds them. Retractions are not re-applied.
func seedRecalled(ctx context.Context, orig, rc *client.Client, t *replay.Tree) ([]SeededItem, error) {
	written := map[string]bool{}
	type recalled struct {
		version int
		content string
		scopes  []string
		tags    []string
	}
	want := map[string]*recalled{}
	var order []string
	for _, b := range t.Branches {
		for _, e := range b.Events {
			d, err := e.Decode()
			if err != nil {
				continue
			}
			switch d := d.(type) {
			case *events.MemoryWritten:
				written[d.ItemID] = true
			case *events.MemoryRecalled:
				for _, it := range d.Items {
					r := want[it.ItemID]
					if r == nil {
						r = &recalled{}
						want[it.ItemID] = r
						order = append(order, it.ItemID)
					}
					if it.Version >= r.version {
						r.version, r.content, r.scopes, r.tags = it.Version, it.Content, d.Scopes, d.Tags
					}
				}
			}
		}
	}
	var out []SeededItem
	var seedSession, seedEvent string
	for _, id := range order {
		if written[id] {
			continue
		}
		if seedSession == "" {
			ack, err := rc.Start(ctx, "", events.SessionStarted{Task: "memory items the replayed session recalled from before it",
				Labels: map[string]string{"kind": "replay-memory", "replay-of": t.Root.ID}})
			if err != nil {
				return nil, fmt.Errorf("replay: memory seed session: %w", err)
			}
			seedSession, seedEvent = ack.Session, ack.ID
		}
		r := want[id]
		var versions []memoryapi.AddRequest
		from := "history"
		if h, err := orig.Memory().History(ctx, id); err == nil {
			for _, rec := range h.Records {
				if rec.Op != memoryapi.OpWrite || rec.Version > r.version {
					continue
				}
				ev := memoryapi.EvidenceHumanCorrection
				if rec.Provenance != nil && rec.Provenance.Evidence != "" {
					ev = rec.Provenance.Evidence
				}
				versions = append(versions, memoryapi.AddRequest{Content: rec.Content, Tags: rec.Tags, Scope: rec.Scope, Evidence: ev})
			}
		}
		if len(versions) == 0 {
			from = "recall"
			scope := ""
			if len(r.scopes) > 0 {
				scope = r.scopes[0]
			}
			versions = []memoryapi.AddRequest{{Content: r.content, Tags: r.tags, Scope: scope, Evidence: memoryapi.EvidenceHumanCorrection}}
		}
		for i, v := range versions {
			v.RequestID = events.DerivedID("rath.replay.seed", id, fmt.Sprint(i))
			v.ItemID, v.Session, v.EventIDs = id, seedSession, []string{seedEvent}
			if _, err := rc.Memory().Add(ctx, v); err != nil {
				return nil, fmt.Errorf("replay: seed memory item %s: %w", id, err)
			}
		}
		out = append(out, SeededItem{ItemID: id, Versions: len(versions), From: from})
	}
	return out, nil
}

// firstBackend is the sandbox backend of the tree's first placement, in its
// root's own events; "" if the root was never placed.
func firstBackend(t *replay.Tree) string {
	for _, ev := range t.Root.Events {
		if ev.Type != events.TypeSandboxPlaced || ev.Session != t.Root.ID {
			continue
		}
		if d, err := ev.Decode(); err == nil {
			return d.(*events.SandboxPlaced).Backend
		}
	}
	return ""
}
