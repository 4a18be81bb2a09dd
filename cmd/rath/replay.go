package main

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
	"github.com/spf13/cobra"

	demoex "github.com/openrath/rath/examples/demo"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/memoryapi"
	"github.com/openrath/rath/pkg/replay"
	"github.com/openrath/rath/pkg/session"
	worker "github.com/openrath/rath/services/agent-worker/service"
)

// replaySource is the CloudEvents source of what rath replay appends itself.
const replaySource = "rath/replay"

// replayOptions are the flags of rath replay.
type replayOptions struct {
	workflow string
	seeds    string
	data     string
	keepData bool
	wait     time.Duration
	idle     time.Duration
	// What-if: fork the original at from and continue it live.
	from uint64
	fork bool
	id   string // the fork's session ID ("": the ledger's choice)
	live liveModel
}

func (a *app) replayCmd() *cobra.Command {
	var o replayOptions
	cmd := &cobra.Command{
		Use:   "replay SESSION",
		Short: "Re-run a session tree in a private runtime and report whether it reproduces (or fork it for a what-if)",
		Long: `replay reads SESSION's whole tree (its root and every fork) from --nats and
runs it again in a private runtime (an embedded NATS and every Rath service in
this process, in a temporary directory): a new root session with the
original's task, labels and workflow bundle, the tool runner seeded from the
same seed directory, scripted agents answering from their scripts, live-model
agents (openai, anthropic) from the original's recorded answers, tools run
for real, and the original's external inputs (a user's memory notes,
emitted events, pauses) applied again at the same place. Then it compares
the two trees branch by branch and event by event, on a normalised form
(docs/replay.md), and prints "reproduced" or the first divergence.
--workflow FILE replays against a modified workflow (and its scripts).

Exit codes: 0 reproduced, 7 diverged, others as for every command.

With --from N --fork it forks SESSION at N in the original system instead
(N must be between turns: the error names the nearest sequences that are;
--id names the fork) and continues the fork live (--provider, --model,
--base-url run its agents on another model: the fork records them as labels
the agent worker honours), waits for it to close, then prints what
"rath diff SESSION FORK" prints, and that command. The fork's turns are taken by that
system's agent worker, so --base-url must be an endpoint its operator allows
(rath up --allow-base-url PROVIDER=URL, or --allow-loopback-endpoints): a label
is something any client can write, so naming an endpoint here does not allow
it, and the worker fails the turn, saying so, rather than send it the key.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.fork {
				return a.whatIf(cmd.Context(), args[0], o)
			}
			if cmd.Flags().Changed("from") {
				return usageError{errors.New("--from N needs --fork (a what-if); a replay always runs the whole tree")}
			}
			if cmd.Flags().Changed("id") {
				return usageError{errors.New("--id names a what-if fork: it needs --fork")}
			}
			return a.replay(cmd.Context(), args[0], o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.workflow, "workflow", "", "replay against this workflow file (and its scripts) instead of the recorded bundle")
	f.StringVar(&o.seeds, "seeds", "", "directory the session's workspace label is relative to (default: found from the labels under the module's examples)")
	f.StringVar(&o.data, "data", "", "JetStream storage and workspaces of the private runtime (default: a fresh temporary directory)")
	f.BoolVar(&o.keepData, "keep-data", false, "keep the temporary data directory")
	f.DurationVar(&o.wait, "wait", 5*time.Minute, "stop the replay (and compare what it did) after this long")
	f.DurationVar(&o.idle, "idle", 30*time.Second, "stop the replay when no event arrived for this long")
	f.Uint64Var(&o.from, "from", 0, "with --fork: the last sequence the what-if fork shares with SESSION")
	f.BoolVar(&o.fork, "fork", false, "what-if: fork SESSION at --from in the original system and continue it live")
	f.StringVar(&o.id, "id", "", "with --fork: the fork's session ID (default: the ledger's choice, printed)")
	f.StringVar(&o.live.provider, "provider", "", "with --fork: run the fork's agents on this provider (openai or anthropic)")
	f.StringVar(&o.live.model, "model", "", "with --fork: model of --provider")
	f.StringVar(&o.live.baseURL, "base-url", "", "with --fork: API endpoint of --provider; the system's agent worker must allow it (rath up --allow-base-url)")
	return cmd
}

// divergedError is returned when a replay does not reproduce the original.
type divergedError struct{ d *replay.Divergence }

func (e *divergedError) Error() string {
	return fmt.Sprintf("replay diverged from the original at branch %s, sequence %d (%s)", e.d.Pos, e.d.Seq, e.d.What)
}

// replayReport is what rath replay prints with --json.
type replayReport struct {
	Original   string `json:"original"`
	Replay     string `json:"replay"`
	Reproduced bool   `json:"reproduced"`
	Finished   bool   `json:"finished"`
	Workflow   string `json:"workflow,omitempty"`
	Events     int    `json:"events"`
	replay.Result
	External []externalInput `json:"external_inputs"`
	// Seeded are the memory items the original recalled without writing
	// them in its tree, written into the private memory before the run.
	Seeded []seededItem `json:"seeded_memory"`
}

type seededItem struct {
	ItemID   string `json:"item_id"`
	Versions int    `json:"versions"`
	// From says where their content came from: "history" (the original's
	// memory service) or "recall" (the recall events alone).
	From string `json:"from"`
}

type externalInput struct {
	Branch  string `json:"branch"`
	Seq     uint64 `json:"seq"`
	Type    string `json:"type"`
	Applied bool   `json:"applied"`
	Error   string `json:"error,omitempty"`
}

func (a *app) replay(ctx context.Context, session string, o replayOptions) error {
	// A workflow that does not load fails here, before any runtime starts
	// or the original is read.
	if o.workflow != "" {
		if _, err := loadWorkflow(o.workflow); err != nil {
			return usageError{fmt.Errorf("--workflow: %w", err)}
		}
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	orig, err := replay.Read(ctx, c, session)
	if err != nil {
		return err
	}
	rep, err := reexecute(ctx, c, orig, o, a.Stderr)
	if err != nil {
		return err
	}
	if a.json {
		if err := a.printJSON(rep); err != nil {
			return err
		}
	} else {
		printReplay(a.Stdout, rep)
	}
	if rep.First != nil {
		return &divergedError{rep.First}
	}
	return nil
}

// reexecute runs the original tree again in a private runtime and compares.
// Progress goes to progress.
func reexecute(ctx context.Context, c *client.Client, orig *replay.Tree, o replayOptions, progress io.Writer) (*replayReport, error) {
	first := orig.Root.Events[0]
	d, err := first.Decode()
	if err != nil {
		return nil, fmt.Errorf("replay: start of %s: %w", orig.Root.ID, err)
	}
	start := *d.(*events.SessionStarted)
	data := o.data
	if data == "" {
		if data, err = os.MkdirTemp("", "rath-replay-"); err != nil {
			return nil, fmt.Errorf("replay data directory: %w", err)
		}
		if !o.keepData {
			defer os.RemoveAll(data)
		}
	}
	seeds, err := replaySeeds(o.seeds, start.Labels, data)
	if err != nil {
		return nil, usageError{err}
	}
	logFile, err := os.Create(filepath.Join(data, "rath.log"))
	if err != nil {
		return nil, fmt.Errorf("replay log: %w", err)
	}
	defer logFile.Close()
	log := slog.New(slog.NewTextHandler(logFile, nil))

	cfg := demoConfig(data, seeds)
	cfg.Ledger.Ledger.Name = fmt.Sprintf("rath-replay-%d", os.Getpid())
	cfg.Worker.Recorded = orig.Stored()
	if b := firstBackend(orig); b != "" {
		// Tools run again where they ran: the original's first placement
		// is on the backend its workflow asked for, or its runner's
		// default, which the private runner takes for its own.
		cfg.ToolRunner.Backend = b
	}
	rt, err := startRuntime(ctx, cfg, "rath-replay", log)
	if err != nil {
		return nil, err
	}
	defer stopLogged(rt, log)()
	fmt.Fprintf(progress, "rath replay: private runtime up (NATS %s, data %s, services' log %s)\n", rt.URL, data, logFile.Name())

	rc, err := client.New(rt.Conn, client.WithRetryFor(30*time.Second), client.WithSource(replaySource))
	if err != nil {
		return nil, err
	}
	// The private ledger's answer (rc retries while none listens) says it is up.
	if _, err := rc.Keys(ctx); err != nil {
		return nil, fmt.Errorf("replay: wait for the private ledger: %w", err)
	}
	rep := &replayReport{Original: orig.Root.ID, Workflow: start.WorkflowRef}
	if o.workflow != "" {
		if err := uploadWorkflow(ctx, rc, o.workflow, &start); err != nil {
			return nil, err
		}
		rep.Workflow = o.workflow + " (" + start.WorkflowRef + ")"
	} else if start.WorkflowRef != "" {
		if err := copyBlob(ctx, c, rc, start.WorkflowRef); err != nil {
			return nil, err
		}
	}

	r := newReplayRun(orig, rc)
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
	if rep.Seeded, err = seedRecalled(ctx, c, rc, orig); err != nil {
		return nil, err
	}
	rt.StartLoop()

	rep.Finished = r.follow(ctx, o.wait, o.idle)
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

// replaySeeds is the directory the session's workspace label is relative
// to: the flag's; for a session of rath demo, the example built into this
// binary, written under data; otherwise the working directory or the
// nearest of its parents that holds the label's path (rath up seeds from
// its working directory).
func replaySeeds(flag string, labels map[string]string, data string) (string, error) {
	if flag != "" {
		return filepath.Abs(flag)
	}
	if labels["example"] == "demo" {
		dir := filepath.Join(data, "example")
		return dir, demoex.Write(dir)
	}
	ws := labels["workspace"]
	if ws == "" {
		return ".", nil // no workspace to seed
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("replay seeds: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, ws)); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("the session seeds its workspace from %q, which is not in the working directory or above it: pass --seeds DIR", ws)
		}
		dir = parent
	}
}

// copyBlob copies a workflow bundle from the original's runtime.
func copyBlob(ctx context.Context, from, to *client.Client, ref string) error {
	raw, err := from.GetBlob(ctx, ref)
	if err != nil {
		return fmt.Errorf("replay: workflow bundle %s: %w", ref, err)
	}
	got, err := to.PutBlob(ctx, raw)
	if err != nil {
		return fmt.Errorf("replay: copy workflow bundle: %w", err)
	}
	if got != ref {
		return fmt.Errorf("replay: workflow bundle %s stored as %s", ref, got)
	}
	return nil
}

// replayRun follows a replay as its events arrive: it maps the replay's
// branches to the original's and applies the original's external inputs
// when the mapped branch reaches the sequence before theirs.
type replayRun struct {
	orig    *replay.Tree
	rc      *client.Client
	arrived chan events.Stored

	toOrig  map[string]*replay.Branch // replay branch → original branch
	fromOrg map[string]string         // original branch → replay branch
	forks   map[string]map[uint64]int // replay branch → forks seen per fork point
	heads   map[string]uint64
	closed  map[string]bool
	ids     map[string]string // original event ID → replay event ID, by position
	pending map[string][]*pendingInput
	inputs  []*pendingInput
}

type pendingInput struct {
	replay.Input
	applied bool
	err     error
}

func newReplayRun(orig *replay.Tree, rc *client.Client) *replayRun {
	r := &replayRun{orig: orig, rc: rc, arrived: make(chan events.Stored, 4096),
		toOrig: map[string]*replay.Branch{}, fromOrg: map[string]string{}, forks: map[string]map[uint64]int{},
		heads: map[string]uint64{}, closed: map[string]bool{}, ids: map[string]string{}, pending: map[string][]*pendingInput{}}
	for _, in := range replay.External(orig) {
		p := &pendingInput{Input: in}
		r.inputs = append(r.inputs, p)
		r.pending[in.Branch.ID] = append(r.pending[in.Branch.ID], p)
	}
	return r
}

func (r *replayRun) started(ack api.Ack) {
	r.toOrig[ack.Session], r.fromOrg[r.orig.Root.ID] = r.orig.Root, ack.Session
	r.heads[ack.Session] = ack.Seq
	r.ids[r.orig.Root.Events[0].ID] = ack.ID
}

// seen records an event of the replay's tree; it reports whether the event
// is new and of the tree (the root, or a fork of one of its branches).
func (r *replayRun) seen(ev events.Stored) bool {
	if _, ok := r.heads[ev.Session]; ok && ev.Seq <= r.heads[ev.Session] {
		return false
	}
	if ev.Type == events.TypeSessionForked {
		var f events.SessionForked
		if json.Unmarshal(ev.Data, &f) == nil {
			if _, ours := r.heads[f.Parent]; !ours {
				return false
			}
			if parent := r.toOrig[f.Parent]; parent != nil {
				if r.forks[f.Parent] == nil {
					r.forks[f.Parent] = map[uint64]int{}
				}
				k := r.forks[f.Parent][f.AtSeq]
				r.forks[f.Parent][f.AtSeq]++
				for _, ch := range parent.Children {
					if ch.ForkSeq != f.AtSeq {
						continue
					}
					if k == 0 {
						r.toOrig[ev.Session], r.fromOrg[ch.ID] = ch, ev.Session
						break
					}
					k--
				}
			}
		}
	}
	if _, ours := r.heads[ev.Session]; !ours && ev.Type != events.TypeSessionForked {
		return false // another session: the memory seed session
	}
	r.heads[ev.Session] = max(r.heads[ev.Session], ev.Seq)
	if ev.Type == events.TypeSessionClosed {
		r.closed[ev.Session] = true
	}
	if o := r.toOrig[ev.Session]; o != nil {
		for _, e := range o.Events {
			if e.Seq == ev.Seq {
				r.ids[e.ID] = ev.ID
			}
		}
	}
	return true
}

// follow handles arriving events until the replay is done, wait passed or
// nothing arrived for idle; it reports whether the replay finished.
func (r *replayRun) follow(ctx context.Context, wait, idle time.Duration) bool {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	quiet := time.NewTimer(idle)
	defer quiet.Stop()
	for !r.done() {
		select {
		case ev := <-r.arrived:
			quiet.Reset(idle)
			if !r.seen(ev) {
				continue
			}
			if o := r.toOrig[ev.Session]; o != nil {
				_ = r.applyReady(ctx, o, ev.Seq)
			}
		case <-deadline.C:
			return false
		case <-quiet.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// done: every replay branch is closed, or has reached the head of an
// original branch that was still open, and every original branch has its
// counterpart.
func (r *replayRun) done() bool {
	for _, b := range r.orig.Branches {
		id, ok := r.fromOrg[b.ID]
		if !ok {
			return false
		}
		if !r.closed[id] && (b.Closed() || r.heads[id] < b.Head()) {
			return false
		}
	}
	for id := range r.heads {
		if _, mapped := r.toOrig[id]; !mapped && !r.closed[id] {
			return false
		}
	}
	return true
}

// applyReady applies the original branch's external inputs that come right
// after seq, in order.
func (r *replayRun) applyReady(ctx context.Context, o *replay.Branch, seq uint64) error {
	target := r.fromOrg[o.ID]
	for _, p := range r.pending[o.ID] {
		if p.applied || p.err != nil {
			continue
		}
		if p.Event.Seq != seq+1 {
			continue
		}
		p.err = r.apply(ctx, target, p.Event)
		p.applied = p.err == nil
		if p.err != nil {
			return p.err
		}
		seq++
	}
	return nil
}

// apply re-applies one external input to the replay branch.
func (r *replayRun) apply(ctx context.Context, session string, e events.Stored) error {
	d, err := e.Decode()
	if err != nil {
		return err
	}
	req := events.DerivedID("rath.replay", session, e.ID)
	switch d := d.(type) {
	case *events.MemoryWritten:
		var ids []string
		for _, id := range d.Provenance.EventIDs {
			if m, ok := r.ids[id]; ok {
				ids = append(ids, m)
			}
		}
		_, err = r.rc.Memory().Add(ctx, memoryapi.AddRequest{RequestID: req, ItemID: d.ItemID, Session: session,
			Content: d.Content, Tags: d.Tags, Scope: d.Scope, Evidence: d.Provenance.Evidence, EventIDs: ids})
	case *events.MemoryRecalled:
		_, err = r.rc.Memory().Recall(ctx, memoryapi.RecallRequest{RequestID: req, Session: session, Query: d.Query,
			Filter: memoryapi.Filter{Scopes: d.Scopes, Tags: d.Tags}, K: len(d.Items), Agent: d.Agent})
	case *events.MemoryRetracted:
		_, err = r.rc.Memory().Retract(ctx, memoryapi.RetractRequest{RequestID: req, ItemID: d.ItemID, Version: d.Version,
			Session: session, By: d.By, Reason: d.Reason})
	case *events.SessionPaused:
		_, err = r.rc.Pause(ctx, session, d.Reason)
	case *events.SessionResumed:
		_, err = r.rc.Resume(ctx, session, d.Reason)
	case *events.SessionClosed:
		_, err = r.rc.Close(ctx, session, *d)
	default:
		ev, nerr := events.NewRaw(session, e.Type, e.Data, events.WithID(req), events.WithSource(e.Source))
		if err = nerr; err == nil {
			_, err = r.rc.Append(ctx, ev)
		}
	}
	if err != nil {
		return fmt.Errorf("replay: re-apply the original's %s (branch %s, seq %d): %w", e.Type, e.Session, e.Seq, err)
	}
	return nil
}

func (r *replayRun) report() []externalInput {
	out := []externalInput{}
	for _, p := range r.inputs {
		in := externalInput{Branch: p.Branch.Pos, Seq: p.Event.Seq, Type: p.Event.Type, Applied: p.applied}
		if p.err != nil {
			in.Error = p.err.Error()
		}
		out = append(out, in)
	}
	return out
}

// printReplay prints a replay's verdict for people.
func printReplay(w io.Writer, rep *replayReport) {
	fmt.Fprintf(w, "original %s, replay %s (%s)\n", rep.Original, rep.Replay, plural(len(rep.Pairs), "branch", "branches"))
	for _, it := range rep.Seeded {
		fmt.Fprintf(w, "  memory item %s: %s seeded from the original's %s\n", it.ItemID, plural(it.Versions, "version", "versions"), it.From)
	}
	for _, in := range rep.External {
		state := "re-applied"
		if !in.Applied {
			state = "NOT re-applied"
			if in.Error != "" {
				state += ": " + in.Error
			}
		}
		fmt.Fprintf(w, "  external input %s seq %d %s: %s\n", in.Branch, in.Seq, in.Type, state)
	}
	if rep.First == nil {
		fmt.Fprintf(w, "reproduced: %s in %s identical\n", plural(rep.Identical, "event", "events"), plural(len(rep.Pairs), "branch", "branches"))
		return
	}
	d := rep.First
	fmt.Fprintf(w, "DIVERGED at branch %s (original %s, replay %s), sequence %d: %s\n", d.Pos, orNone(d.Original), orNone(d.Replay), d.Seq, d.What)
	if !rep.Finished {
		fmt.Fprintln(w, "  (the replay did not finish: it was stopped after --wait or --idle)")
	}
	if d.Got != nil {
		fmt.Fprintf(w, "  original: seq %d %s from %s\n", d.Got.Seq, d.Got.Type, d.Got.Source)
	}
	if d.Replayed != nil {
		fmt.Fprintf(w, "  replayed: seq %d %s from %s\n", d.Replayed.Seq, d.Replayed.Type, d.Replayed.Source)
	}
	if d.Diff != "" {
		fmt.Fprint(w, indent(d.Diff, "  "))
	}
	fmt.Fprintf(w, "%s identical before and around it\n", plural(rep.Identical, "event", "events"))
}

func indent(s, by string) string {
	lines := strings.SplitAfter(s, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l != "" {
			b.WriteString(by + l)
		}
	}
	return b.String()
}

// errWatched stops a watch once the session closed.
var errWatched = errors.New("closed")

// whatIf forks the session at o.from in the original system and continues
// the fork live: the agent the original routed next after o.from takes a
// turn on the fork, on the model the labels name. It waits for the fork (or
// the last fork the workflow makes of it) to close, then prints the
// comparison of the session and that branch.
func (a *app) whatIf(ctx context.Context, session string, o replayOptions) error {
	if o.from == 0 {
		return usageError{errors.New("--fork needs --from N: the last sequence the fork shares with the session")}
	}
	if o.workflow != "" {
		return usageError{errors.New("--workflow applies to a replay, not to a what-if fork (the fork keeps its session's workflow; --provider and --model change its agents' model)")}
	}
	labels := map[string]string{}
	if p := o.live.provider; p != "" {
		if _, err := liveWorkflowCheck(o.live); err != nil {
			return usageError{err}
		}
		labels[worker.LabelProvider], labels[worker.LabelModel] = p, o.live.model
		if o.live.baseURL != "" {
			labels[worker.LabelBaseURL] = o.live.baseURL
		}
	} else if o.live.model != "" || o.live.baseURL != "" {
		return usageError{errors.New("--model and --base-url need --provider")}
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	st, err := c.Overview(ctx, api.StateRequest{Session: session, At: o.from})
	if err != nil {
		return err
	}
	tree, err := replay.Read(ctx, c, session)
	if err != nil {
		return err
	}
	if st.Turn != nil || len(st.Tools.Open) > 0 {
		log := tree.Logical(tree.Branch(session))
		where := ""
		if st.Turn != nil {
			end := "its head"
			if after := nextBoundary(log, o.from, false); after != 0 {
				end = fmt.Sprint(after)
			}
			where = fmt.Sprintf("is inside the turn of %s (events %d..%s)", st.Turn.Agent, st.Turn.Seq, end)
		} else {
			t := st.Tools.Open[0]
			where = fmt.Sprintf("has tool call %s still %s", t.CallID, t.Status)
		}
		return usageError{fmt.Errorf("sequence %d of %s %s: fork between turns%s", o.from, session, where, suggestFrom(log, o.from))}
	}
	agent := ""
	for _, e := range tree.Logical(tree.Branch(session)) {
		if e.Seq <= o.from || e.Type != events.TypeSelectorDecided {
			continue
		}
		var d events.SelectorDecided
		if json.Unmarshal(e.Data, &d) == nil && d.Agent != "" {
			agent = d.Agent
			break
		}
	}
	if agent == "" {
		return usageError{fmt.Errorf("no agent turn follows sequence %d in %s: nothing to continue", o.from, session)}
	}
	model := "its workflow's model"
	if o.live.provider != "" {
		model = o.live.provider + "/" + o.live.model
	}
	ack, err := c.Fork(ctx, api.ForkRequest{Parent: session, At: o.from, ID: o.id, Labels: labels, EventSource: replaySource,
		Reason: fmt.Sprintf("what-if: %s continues on %s", agent, model)})
	if err != nil {
		return err
	}
	fork := ack.Session
	turnID := "turn-" + events.DerivedID(ack.ID, "what-if")[:8]
	opts := []events.Option{events.WithID(events.DerivedID(ack.ID, "what-if-decided")), events.WithCausation(ack.ID)}
	if _, err := c.Emit(ctx, fork, &events.SelectorDecided{Rule: "what-if", Route: "agent:" + agent, Agent: agent, TurnID: turnID,
		Reason: "rath replay --fork: the agent the original routed after " + fmt.Sprint(o.from)}, opts...); err != nil {
		return err
	}
	opts[0] = events.WithID(events.DerivedID(ack.ID, "what-if-request"))
	if _, err := c.Emit(ctx, fork, &events.TurnRequested{TurnID: turnID, Agent: agent, Rule: "what-if"}, opts...); err != nil {
		return err
	}
	fmt.Fprintf(a.Stderr, "rath replay: what-if fork %s of %s at %d: %s on %s\n", fork, session, o.from, agent, model)

	wctx, cancel := context.WithTimeout(ctx, o.wait)
	defer cancel()
	last := fork
	for {
		var closed events.SessionClosed
		var failed *events.TurnFailed
		err := c.Watch(wctx, last, func(e events.Stored) error {
			switch e.Type {
			case events.TypeSessionClosed:
				_ = json.Unmarshal(e.Data, &closed)
				return errWatched
			case events.TypeTurnFailed:
				// The what-if's own turn failing (its endpoint refused, no
				// key, the model unreachable) ends it: nothing would run
				// the fork on, and waiting --wait for a close would leave
				// it open for good.
				var f events.TurnFailed
				if json.Unmarshal(e.Data, &f) == nil && f.TurnID == turnID {
					failed = &f
					return errWatched
				}
			}
			return nil
		}, client.From(o.from+1))
		if failed != nil {
			reason := fmt.Sprintf("what-if turn of %s failed: %s", failed.Agent, failed.Error)
			if _, cerr := c.Close(ctx, last, events.SessionClosed{Outcome: "failed", Reason: reason}); cerr != nil {
				return fmt.Errorf("what-if fork %s: %s; closing it: %w", last, reason, cerr)
			}
			return fmt.Errorf("what-if fork %s: %s (the fork is closed, outcome failed)", last, reason)
		}
		if !errors.Is(err, errWatched) {
			return fmt.Errorf("what-if fork %s: not closed (%w); compare later with: %s diff %s %s", last, err, a.self(), session, last)
		}
		if closed.Outcome != "superseded" {
			break
		}
		g, err := c.Lineage(ctx, last)
		if err != nil {
			return err
		}
		next := newestChild(g.Root, last)
		if next == "" {
			break
		}
		last = next
	}
	d, err := contrast(ctx, c, session, last)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(d)
	}
	printContrast(a.Stdout, d)
	fmt.Fprintf(a.Stdout, "\ncompare again with: %s diff %s %s\n", a.self(), session, last)
	return nil
}

// betweenTurns reports whether st is between turns: no turn in flight and
// no tool call open, where a what-if can fork.
func betweenTurns(st *session.State) bool {
	if st.Turn != nil {
		return false
	}
	for _, t := range st.Tools {
		if t.Open() {
			return false
		}
	}
	return true
}

// nextBoundary is the first sequence after from (the last before it when
// before is set) of a session's logical log at which the session is between
// turns and an agent's turn follows, or 0. Merged events are not folded
// in: they move neither turns nor tool calls of the session.
func nextBoundary(log []events.Stored, from uint64, before bool) uint64 {
	st := &session.State{}
	var found []uint64 // boundaries so far, waiting for an agent's turn
	best := uint64(0)
	for _, e := range log {
		if e.Type == events.TypeSelectorDecided {
			var d events.SelectorDecided
			if json.Unmarshal(e.Data, &d) == nil && d.Agent != "" {
				for _, b := range found {
					if before && b < from {
						best = b
					} else if !before && b > from {
						return b
					}
				}
				found = found[:0]
			}
		}
		session.Apply(st, e)
		if betweenTurns(st) {
			found = append(found, e.Seq)
		}
	}
	return best
}

// suggestFrom names the nearest sequences around from that a what-if can
// fork at.
func suggestFrom(log []events.Stored, from uint64) string {
	var opts []string
	for _, b := range []uint64{nextBoundary(log, from, true), nextBoundary(log, from, false)} {
		if b != 0 {
			opts = append(opts, fmt.Sprintf("--from %d", b))
		}
	}
	if len(opts) == 0 {
		return ""
	}
	return ": use " + strings.Join(opts, " or ")
}

// newestChild is the last fork of session in a lineage graph.
func newestChild(n *api.Node, session string) string {
	if n == nil {
		return ""
	}
	if n.Session == session {
		if len(n.Children) == 0 {
			return ""
		}
		return n.Children[len(n.Children)-1].Session
	}
	for _, c := range n.Children {
		if s := newestChild(c, session); s != "" {
			return s
		}
	}
	return ""
}

// liveWorkflowCheck checks a live model's flags as the demo's --provider.
func liveWorkflowCheck(live liveModel) (bool, error) {
	if live.provider != "openai" && live.provider != "anthropic" {
		return false, fmt.Errorf("--provider must be openai or anthropic, got %q", live.provider)
	}
	if live.model == "" {
		return false, errors.New("--provider needs --model")
	}
	return true, nil
}

// seedRecalled writes into the private memory the items the original
// recalled that its tree did not write (notes that were in the original's
// memory before the session): every version up to the last one recalled,
// as the original's memory service keeps their history, or, when it does
// not answer, the content the recall events recorded. They are written in
// a session of their own, outside the replayed tree, so a re-executed
// recall finds them. Retractions are not re-applied.
func seedRecalled(ctx context.Context, orig, rc *client.Client, t *replay.Tree) ([]seededItem, error) {
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
	var out []seededItem
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
		out = append(out, seededItem{ItemID: id, Versions: len(versions), From: from})
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
