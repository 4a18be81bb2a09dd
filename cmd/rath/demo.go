package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	demoex "github.com/openrath/rath/examples/demo"
	"github.com/openrath/rath/internal/dossier"
	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/memoryapi"
	"github.com/openrath/rath/pkg/session"
	worker "github.com/openrath/rath/services/agent-worker/service"
)

// demoExample is where the demo's example lives in the repository; the
// rath binary embeds it.
const demoExample = "examples/demo"

// demoOptions are the flags of rath demo.
type demoOptions struct {
	example  string
	data     string
	keepData bool
	out      string
	wait     time.Duration
	serve    bool
	live     liveModel
	// allowBaseURLs and allowLoopback allow the agent worker's model
	// endpoints besides the official ones (as rath up's flags do).
	allowBaseURLs []string
	allowLoopback bool
}

// liveModel overrides every agent's provider, for a run against a live model.
type liveModel struct {
	provider, model, baseURL string
}

func (a *app) demoCmd() *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the software-task example end to end and export its evidence dossier",
		Long: `demo starts an embedded NATS server and every Rath service in this process and
runs the example built into this binary (examples/demo of the repository;
--example DIR runs a directory laid out the same way): a researcher reads an
issue and recalls notes from memory, a coder patches a real Go repository in
the session's sandbox, a validator runs go test through the tool runner and
rejects the first patch, the workflow records the failure pattern in memory
and forks from before the patch, and the coder's second attempt on the new
branch passes. It prints the events as they arrive, then a summary, and writes
the dossier to --out (default ./rath-demo).

The agents use the deterministic scripted provider unless --provider names a
live one (openai or anthropic, with --model and --base-url; keys from
OPENAI_API_KEY and ANTHROPIC_API_KEY). The demo's agent worker sends requests,
and the key, to the provider's official endpoint, to the --base-url named on
this command line (naming it allows it), and to what --allow-base-url and
--allow-loopback-endpoints allow.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.demo(cmd.Context(), o)
		},
	}
	demoFlags(cmd, &o, "rath-demo", "the example directory: workflow.yaml, its scripts and the repository repo/ (default: "+demoExample+", built into this binary)")
	f := cmd.Flags()
	f.StringVar(&o.live.provider, "provider", "", "run every agent on this provider instead of its script: openai or anthropic")
	f.StringVar(&o.live.model, "model", "", "model of --provider")
	f.StringVar(&o.live.baseURL, "base-url", "", "API endpoint of --provider (allowed for the demo's agent worker)")
	allowEndpointFlags(cmd, &o.allowBaseURLs, &o.allowLoopback)
	cmd.AddCommand(a.demoSupportCmd())
	cmd.AddCommand(a.demoResearchCmd())
	return cmd
}

func (a *app) demo(ctx context.Context, o demoOptions) error {
	run, err := a.runDemo(ctx, o)
	return a.finishDemo(ctx, "rath demo", o, run, err)
}

// serveDemo keeps a finished run's runtime up, with the web console, until
// ctx ends, saying how to look around.
func (a *app) serveDemo(ctx context.Context, run *demoRun) {
	rath := fmt.Sprintf("%s --nats %s --creds %s", a.self(), run.rt.URL, run.rt.Creds)
	fmt.Fprintf(a.Stdout, "rath demo: the runtime stays up at %s until interrupted; try\n  %s graph %s\n  %s audit final %s\n",
		run.rt.URL, rath, run.root, rath, run.root)
	// The console on a port of its own: a rath up may hold the default.
	if w, err := serveWeb(run.rt, httpEndpoint{addr: "127.0.0.1:0"}, run.log); err != nil {
		fmt.Fprintf(a.Stdout, "rath demo: no console: %v\n", err)
	} else {
		defer w.stop()
		path, expires, err := w.console.Link("/s/" + run.root)
		if err != nil {
			fmt.Fprintf(a.Stdout, "rath demo: no console: %v\n", err)
		} else {
			fmt.Fprintf(a.Stdout, "  the console: %s%s\n    (a one-time sign-in link to the root session, until %s; afterwards sign in at %s/login with %s)\n",
				w.url(), path, expires.Format("15:04:05"), w.url(), run.rt.Creds)
		}
	}
	<-ctx.Done()
}

// demoRun is a finished demo whose runtime is still up.
type demoRun struct {
	rt      *runtime.Runtime
	log     *slog.Logger // the services' log
	root    string
	data    string
	out     string // the dossier's directory
	cleanup []func()
	// temporary says that close removes data.
	temporary bool
}

// close stops the runtime and removes what the run does not keep.
func (r *demoRun) close() {
	for i := len(r.cleanup) - 1; i >= 0; i-- {
		r.cleanup[i]()
	}
}

// runDemo runs the example to its end, prints the report and writes the
// dossier. The runtime stays up until the returned run is closed, which the
// caller must do even when the error is not nil.
func (a *app) runDemo(ctx context.Context, o demoOptions) (*demoRun, error) {
	example, err := checkExample(o.example)
	if err != nil {
		return nil, usageError{err}
	}
	run, err := newDemoRun(o, "rath-demo")
	if err != nil {
		return run, err
	}
	if example == "" {
		example = filepath.Join(run.data, "example")
		if err := demoex.Write(example); err != nil {
			return run, err
		}
	}
	if err := a.startDemoRuntime(ctx, run, o, "rath demo"); err != nil {
		return run, err
	}

	c, err := client.New(run.rt.Conn, client.WithRetryFor(30*time.Second), client.WithSource("rath/demo"))
	if err != nil {
		return run, err
	}
	wfPath := filepath.Join(example, "workflow.yaml")
	if o.live.provider != "" {
		if wfPath, err = liveWorkflow(wfPath, run.data, o.live); err != nil {
			return run, usageError{err}
		}
	}
	issue, err := os.ReadFile(filepath.Join(example, "repo", "ISSUE.md"))
	if err != nil {
		return run, fmt.Errorf("demo issue: %w", err)
	}

	progress, stop, err := a.followDemo(run, nil)
	if err != nil {
		return run, err
	}
	defer stop()

	start := time.Now()
	if run.root, err = startDemo(ctx, c, example, wfPath, string(issue)); err != nil {
		return run, err
	}
	fmt.Fprintf(a.Stdout, "rath demo: session %s started (root below; a fork is fork-N@SEQ: the Nth created, at sequence SEQ)\n", run.root)
	fmt.Fprintf(a.Stdout, "rath demo: a line per step, numbered by its sequence in its session; the events between (chunks, model calls, tool starts) are in the dossier\n")

	wctx, cancel := context.WithTimeout(ctx, o.wait)
	defer cancel()
	select {
	case <-progress.finished:
	case <-wctx.Done():
		return run, fmt.Errorf("demo: not finished after %s (%s still open; see %s)", o.wait, plural(progress.open(), "session", "sessions"), filepath.Join(run.data, "rath.log"))
	}
	fmt.Fprintf(a.Stdout, "\nrath demo: finished in %s\n", time.Since(start).Round(10*time.Millisecond))
	return run, a.demoReport(ctx, c, run.root, o.out, progress)
}

// startDemo uploads the workflow and the example's repository (the
// workspace seed) and starts the root session.
func startDemo(ctx context.Context, c *client.Client, example, wfPath, issue string) (string, error) {
	data := events.SessionStarted{
		Task:   strings.TrimSpace(issue),
		Labels: map[string]string{"example": "demo"},
	}
	// The ledger creates the streams and buckets as it starts: its answer
	// (the client retries while no ledger listens) says it is up.
	if _, err := c.Keys(ctx); err != nil {
		return "", fmt.Errorf("demo: wait for the ledger: %w", err)
	}
	if err := uploadWorkflow(ctx, c, wfPath, &data); err != nil {
		return "", err
	}
	if err := c.SeedWorkspace(ctx, filepath.Join(example, "repo"), &data); err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	data.Labels[client.LabelWorkspaceFrom] = "repo" // not this run's temporary directory
	if err := seedNotes(ctx, c); err != nil {
		return "", err
	}
	ack, err := c.Start(ctx, "", data)
	if err != nil {
		return "", fmt.Errorf("demo: start session: %w", err)
	}
	return ack.Session, nil
}

// checkExample returns the absolute path of the --example directory, or ""
// for the embedded example, which the run writes into its data directory.
func checkExample(flag string) (string, error) {
	if flag == "" {
		return "", nil
	}
	if _, err := os.Stat(filepath.Join(flag, "workflow.yaml")); err != nil {
		return "", fmt.Errorf("--example %s: no workflow.yaml: %w", flag, err)
	}
	return filepath.Abs(flag)
}

// demoConfig is `rath up`'s configuration for a private runtime: a free
// port, the data directory.
func demoConfig(data string) runtime.Config {
	cfg := privateBase().Private(data)
	cfg.Ledger.Ledger.Name = fmt.Sprintf("rath-demo-%d", os.Getpid())
	return cfg
}

// privateBase is what a private runtime (rath demo, rath replay) starts
// from: rath up's defaults, with the model keys of this environment.
func privateBase() runtime.Config {
	cfg := runtime.DefaultConfig()
	cfg.Worker.Keys = worker.KeysFromEnv(os.Getenv)
	return cfg
}

// config is the demo's runtime configuration: demoConfig with the model
// endpoints the flags allow, and --base-url, which the operator named for
// the demo's own agent worker.
func (o demoOptions) config(data string) runtime.Config {
	cfg := demoConfig(data)
	cfg.Worker.AllowBaseURLs, cfg.Worker.AllowLoopback = slices.Clone(o.allowBaseURLs), o.allowLoopback
	if live := o.live; live.baseURL != "" && (live.provider == workflow.ProviderOpenAI || live.provider == workflow.ProviderAnthropic) {
		cfg.Worker.AllowBaseURLs = append(cfg.Worker.AllowBaseURLs, live.provider+"="+live.baseURL)
	}
	return cfg
}

// demoProgress prints events as they arrive and tells when every session of
// the run has closed.
type demoProgress struct {
	out io.Writer

	mu       sync.Mutex
	sessions map[string]string // session → status ("open" until it closes, then its outcome)
	order    []string
	accepted string
	finished chan struct{}
	done     bool
	// branches are the run's sessions as they started or forked, and names
	// their names for people (dossier.BranchNames: root, fork-1@22…), the
	// names the dossier uses; notes is the session of the seeded notes.
	branches []dossier.Branch
	names    map[string]string
	notes    string
	// writes says where each memory item version was written in the run
	// ("root at 50"), for the lines of the recalls that bring it back.
	writes map[string]string
	// states are the states of the sessions seen, folded from their events.
	states map[string]*session.State
}

func newDemoProgress(out io.Writer) *demoProgress {
	return &demoProgress{out: out, sessions: map[string]string{}, finished: make(chan struct{}), names: map[string]string{}, writes: map[string]string{},
		states: map[string]*session.State{}}
}

// name is a session's name in the progress lines.
func (p *demoProgress) name(id string) string {
	switch {
	case p.names[id] != "":
		return p.names[id]
	case id == p.notes:
		return "notes"
	}
	return id
}

// memory follows the memory an item's recall brings back to where the run
// wrote it: for a recall, it says where its items were written ("" for a
// recall of nothing written in the run, and for any other event).
func (p *demoProgress) memory(e session.Step) string {
	switch d := e.Data.(type) {
	case *events.MemoryWritten:
		if e.Session != p.notes {
			p.writes[fmt.Sprintf("%s@%d", d.ItemID, d.Version)] = fmt.Sprintf("%s at %d", p.name(e.Session), e.Seq)
		}
	case *events.MemoryRecalled:
		var from []string
		for _, it := range d.Items {
			if at, ok := p.writes[fmt.Sprintf("%s@%d", it.ItemID, it.Version)]; ok {
				from = append(from, fmt.Sprintf("%s, written on %s", it.ItemID, at))
			}
		}
		if len(from) > 0 {
			return " (" + strings.Join(from, "; ") + ")"
		}
	}
	return ""
}

func (p *demoProgress) open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.openLocked()
}

// openLocked is open with p.mu held.
func (p *demoProgress) openLocked() int {
	n := 0
	for _, s := range p.sessions {
		if s == "open" {
			n++
		}
	}
	return n
}

// onMsg handles one live event. NATS calls it from one goroutine per
// subscription, so events print in the order they were stored per session.
// Each session of the run is followed by its state, folded from the events
// seen (session.Walk): its start or fork, its lineage, its close.
func (p *demoProgress) onMsg(m *nats.Msg) {
	ev, err := events.ParseStored(m.Data)
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.states[ev.Session]
	if st == nil {
		st = &session.State{}
		p.states[ev.Session] = st
	}
	was := st.Status
	_ = session.Walk(st, []events.Stored{ev}, session.Hooks{After: func(st *session.State, e session.Step) { p.step(st, was, e) }}) // no Read: cannot fail
}

// step prints one event's line and follows its session: a start or fork
// (status was none) names it, before its line prints, from its lineage and
// the order the sessions were created in, as in the dossier; a start
// without a workflow is the seeded notes, not part of the run; a close
// records the outcome and, with every session closed, ends the run.
func (p *demoProgress) step(st *session.State, was session.Status, e session.Step) {
	opened := was == "" && st.Status != ""
	if opened && st.Lineage.Parent == "" && st.Workflow == "" {
		p.notes = e.Session
		opened = false
	}
	if opened && !slices.ContainsFunc(p.branches, func(x dossier.Branch) bool { return x.ID == e.Session }) {
		p.branches = append(p.branches, dossier.Branch{ID: e.Session, Created: e.Time, Parent: st.Lineage.Parent, ForkSeq: st.Lineage.ForkSeq})
		p.names = dossier.BranchNames(p.branches)
	}
	if line := describeEvent(e.Stored, p.names); line != "" {
		fmt.Fprintf(p.out, "  %-10s %4d  %s%s\n", p.name(e.Session), e.Seq, line, p.memory(e))
	}
	_, ours := p.sessions[e.Session]
	switch {
	case opened:
		if !ours {
			p.order = append(p.order, e.Session)
		}
		p.sessions[e.Session] = "open"
	case ours && st.Status == session.StatusClosed && was != session.StatusClosed:
		p.sessions[e.Session] = st.Outcome
		if st.Outcome == "accepted" {
			p.accepted = e.Session
		}
		if p.openLocked() == 0 && !p.done {
			p.done = true
			close(p.finished)
		}
	}
}

// demoLines are the kinds of event the demo prints a line for: the run's
// story without its chatter (chunks, model calls, tool starts).
var demoLines = map[string]bool{
	events.TypeSessionStarted: true, events.TypeSessionForked: true, events.TypeSessionClosed: true,
	events.TypeTurnRequested: true, events.TypeToolRequested: true, events.TypeToolCompleted: true,
	events.TypeValidationPassed: true, events.TypeValidationFailed: true, events.TypeExperimentRecorded: true,
	events.TypeMemoryRecalled: true, events.TypeMemoryWritten: true, events.TypeSelectorDecided: true,
}

// describeEvent is one progress line (events.Summary), or "" for events not
// worth a line. Session IDs in the event's data are replaced by their names
// first, so a summary clips the text people read, not an ID.
func describeEvent(ev events.Stored, names map[string]string) string {
	if !demoLines[ev.Type] {
		return ""
	}
	ev.Data = json.RawMessage(dossier.ReplaceIDs(string(ev.Data), names))
	return events.Summary(ev)
}

// seedNotes records the project notes the researcher recalls: what a team
// learnt before, in a session of its own that the notes' provenance names,
// justified by a human correction.
func seedNotes(ctx context.Context, c *client.Client) error {
	start, err := c.Start(ctx, "", events.SessionStarted{
		Task:   "notes the team took on the slug package before this run",
		Labels: map[string]string{"example": "demo", "kind": "notes"},
	})
	if err != nil {
		return fmt.Errorf("demo: notes session: %w", err)
	}
	notes := []struct {
		content string
		tags    []string
	}{
		{"House style for slugs: ASCII lower case, letters and digits only, words joined by single dashes, no dash at either end.", []string{"convention", "slug"}},
		{"Run go test ./... in the repository root before handing a patch over; the validator rejects anything that does not pass.", []string{"process"}},
	}
	for _, n := range notes {
		if _, err := c.Memory().Add(ctx, memoryapi.AddRequest{
			Session: start.Session, Content: n.content, Tags: n.tags, Scope: demoScope,
			Evidence: memoryapi.EvidenceHumanCorrection, EventIDs: []string{start.ID},
		}); err != nil {
			return fmt.Errorf("demo: seed memory: %w", err)
		}
	}
	if _, err := c.Emit(ctx, start.Session, &events.SessionClosed{Outcome: "recorded", Reason: "notes taken"}); err != nil {
		return fmt.Errorf("demo: close the notes session: %w", err)
	}
	return nil
}

// demoScope is the memory scope of the example's notes and failure patterns.
const demoScope = "project:slug"

// liveWorkflow writes a copy of the workflow whose agents all use the live
// provider (their scripts dropped) and returns its path.
func liveWorkflow(path, dir string, live liveModel) (string, error) {
	if live.provider != workflow.ProviderOpenAI && live.provider != workflow.ProviderAnthropic {
		return "", fmt.Errorf("--provider must be %s or %s, got %q", workflow.ProviderOpenAI, workflow.ProviderAnthropic, live.provider)
	}
	if live.model == "" {
		return "", errors.New("--provider needs --model")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	out, err := modelChange{provider: live.provider, model: live.model, baseURL: live.baseURL}.rewrite(raw, path)
	if err != nil {
		return "", err
	}
	dst := filepath.Join(dir, "workflow-"+live.provider+".yaml")
	return dst, os.WriteFile(dst, out, 0o644)
}

func mappingValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func setMapping(m *yaml.Node, key, value string) {
	if v := mappingValue(m, key); v != nil {
		v.Kind, v.Tag, v.Value = yaml.ScalarNode, "!!str", value
		return
	}
	m.Content = append(m.Content,
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key},
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value})
}

func deleteMapping(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
			return
		}
	}
}

// demoReport prints what the run did, verifies every branch and writes the
// dossier.
func (a *app) demoReport(ctx context.Context, c *client.Client, root, out string, p *demoProgress) error {
	p.mu.Lock()
	order := slices.Clone(p.order)
	outcomes := maps.Clone(p.sessions)
	names := maps.Clone(p.names)
	p.mu.Unlock()
	fmt.Fprintf(a.Stdout, "%s:\n", plural(len(order), "branch", "branches"))
	broken := 0
	for _, id := range order {
		st, err := c.Overview(ctx, api.StateRequest{Session: id, Tail: 1})
		if err != nil {
			return fmt.Errorf("demo: state of %s: %w", id, err)
		}
		verdict := "no validation"
		if n := len(st.Validations.Last); n > 0 {
			v := st.Validations.Last[n-1]
			verdict = "validation failed: " + v.Validator
			if v.Passed {
				verdict = "validation passed: " + v.Validator
			}
		}
		rep, err := c.Verify(ctx, id)
		if err != nil {
			return fmt.Errorf("demo: verify %s: %w", id, err)
		}
		chain := "chain OK"
		if !rep.OK {
			broken++
			chain = "chain BROKEN"
		}
		from := "started"
		if st.Lineage.Parent != "" {
			from = fmt.Sprintf("fork of %s at %d", names[st.Lineage.Parent], st.Lineage.ForkSeq)
		}
		fmt.Fprintf(a.Stdout, "  %-10s %-18s %-11s %-28s %5d tokens  %-8s  %s\n", names[id], from, outcomes[id], verdict,
			st.Usage.Total.In+st.Usage.Total.Out, chain, id)
	}
	d, err := dossier.Build(ctx, c, root, dossier.Options{Blobs: c.GetBlob})
	if err != nil {
		return fmt.Errorf("demo: dossier: %w", err)
	}
	if err := d.Write(out); err != nil {
		return fmt.Errorf("demo: write dossier: %w", err)
	}
	fmt.Fprintf(a.Stdout, "  dossier: %s (dossier.json, dossier.md, graph.html; check it with: %s verify --dossier %s)\n",
		filepath.Join(out, "dossier.md"), a.self(), out)
	if broken > 0 {
		return fmt.Errorf("demo: %s not verify", plural(broken, "branch does", "branches do"))
	}
	if p.accepted == "" {
		return errors.New("demo: no branch was accepted")
	}
	return nil
}
