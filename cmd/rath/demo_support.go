package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	supportex "github.com/openrath/rath/examples/support"
	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/dossier"
	"github.com/openrath/rath/internal/retail"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/toolserver"
)

// supportExample is where the support demo's example lives in the
// repository; the rath binary embeds it.
const supportExample = "examples/support"

// supportTask is the task rath demo support runs by default.
const supportTask = "cancel-and-refund"

// supportOptions are the flags of rath demo support.
type supportOptions struct {
	demoOptions
	task string
}

func (a *app) demoSupportCmd() *cobra.Command {
	var o supportOptions
	cmd := &cobra.Command{
		Use:   "support",
		Short: "Run the customer-support example (a simulated customer, an assistant, a shop with a policy) and grade it",
		Long: `support starts an embedded NATS server and every Rath service in this process,
serves the tools of a small shop (find_user, get_order, cancel_order,
refund_order, end_conversation) from a tool server in the same process, and
runs one task of the example built into this binary (examples/support of the
repository; --example DIR runs a directory laid out the same way): a
simulated customer and a support assistant talk in turns in one session. The
session's workspace holds the shop's written policy (POLICY.md) and its
database at the start (db.json); the shop's tools enforce the policy and
record what each call changed, and a gate holds refunds over $200 for a
supervisor, whom nobody plays in the demo. When the customer ends the
conversation the shop grades the run: the final database against the task's
expected one (validation domain-state) and the policy's decision about every
call (validation policy). The dossier, written to --out (default
./rath-demo-support), shows the conversation, each call's state changes, the
policy's decisions and the grade.

Tasks: cancel-and-refund (the default: two changes the policy allows) and
refund-forbidden (a customer insists on a refund the policy forbids; the gate
and the refund rule refuse it). Both agents are scripted.`,
		Example: `  rath demo support                                                   # the default task, dossier in ./rath-demo-support
  rath demo support --task refund-forbidden --out rath-demo-refused   # the refund the policy forbids
  rath verify --dossier rath-demo-support                             # the dossier, offline`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.demoSupport(cmd.Context(), o)
		},
	}
	demoFlags(cmd, &o.demoOptions, "rath-demo-support", "the example directory: workflow.yaml, workspace/ and tasks/ (default: "+supportExample+", built into this binary)")
	cmd.Flags().StringVar(&o.task, "task", supportTask, "the task to run: a directory of the example's tasks/")
	return cmd
}

func (a *app) demoSupport(ctx context.Context, o supportOptions) error {
	run, err := a.runSupport(ctx, o)
	return a.finishDemo(ctx, "rath demo support", o.demoOptions, run, err)
}

// runSupport runs one task of the support example to its end, prints the
// conversation and the grade and writes the dossier. The runtime stays up
// until the returned run is closed, which the caller must do even when the
// error is not nil.
func (a *app) runSupport(ctx context.Context, o supportOptions) (*demoRun, error) {
	example, err := checkExample(o.example)
	if err != nil {
		return nil, usageError{err}
	}
	if o.example != "" {
		// The task is checked before anything starts.
		if _, err := retail.LoadTask(example, o.task); err != nil {
			return nil, usageError{err}
		}
	}
	run, err := newDemoRun(o.demoOptions, "rath-demo-support")
	if err != nil {
		return run, err
	}
	if example == "" {
		example = filepath.Join(run.data, "example")
		if err := supportex.Write(example); err != nil {
			return run, err
		}
	}
	task, err := retail.LoadTask(example, o.task)
	if err != nil {
		return run, usageError{err}
	}
	wfPath, err := taskWorkflow(example, filepath.Join(run.data, "workflow"), task)
	if err != nil {
		return run, usageError{err}
	}
	if err := a.startDemoRuntime(ctx, run, o.demoOptions, "rath demo support"); err != nil {
		return run, err
	}
	log := run.log
	if err := serveShop(ctx, run, task, log); err != nil {
		return run, err
	}

	c, err := client.New(run.rt.Conn, client.WithRetryFor(30*time.Second), client.WithSource("rath/demo"))
	if err != nil {
		return run, err
	}
	progress, stop, err := a.followDemo(run, (*demoProgress).policyLine)
	if err != nil {
		return run, err
	}
	defer stop()

	start := time.Now()
	data := events.SessionStarted{
		Task:   "Serve the shop's customer within the policy in POLICY.md (task " + task.ID + ").",
		Labels: map[string]string{"example": "support", retail.LabelTask: task.ID},
	}
	if _, err := c.Keys(ctx); err != nil {
		return run, fmt.Errorf("demo: wait for the ledger: %w", err)
	}
	if err := uploadWorkflow(ctx, c, wfPath, &data); err != nil {
		return run, err
	}
	if err := c.SeedWorkspace(ctx, filepath.Join(example, supportex.Workspace), &data); err != nil {
		return run, fmt.Errorf("demo: %w", err)
	}
	data.Labels[client.LabelWorkspaceFrom] = supportex.Workspace // not this run's temporary directory
	ack, err := c.Start(ctx, "", data)
	if err != nil {
		return run, fmt.Errorf("demo: start session: %w", err)
	}
	run.root = ack.Session
	fmt.Fprintf(a.Stdout, "rath demo support: task %s, session %s started\n", task.ID, run.root)

	wctx, cancel := context.WithTimeout(ctx, o.wait)
	defer cancel()
	select {
	case <-progress.finished:
	case <-wctx.Done():
		return run, fmt.Errorf("demo: not finished after %s (see %s)", o.wait, filepath.Join(run.data, "rath.log"))
	}
	fmt.Fprintf(a.Stdout, "\nrath demo support: finished in %s\n", time.Since(start).Round(10*time.Millisecond))
	err = a.demoReport(ctx, c, run.root, o.out, progress)
	if d, derr := dossier.Open(o.out); derr == nil {
		printSupport(a, d)
	}
	return run, err
}

// supportLines are the kinds of event rath demo support prints a line for
// besides rath demo's: the policy's refusals and the gate's approvals.
var supportLines = map[string]bool{
	events.TypeToolFailed: true, events.TypeApprovalRequested: true, events.TypeApprovalExpired: true,
	events.TypeApprovalGranted: true, events.TypeApprovalRejected: true,
}

// policyLine prints the line of a refused call or of an approval, after
// onMsg, on the subscription's goroutine: lines stay in log order.
func (p *demoProgress) policyLine(m *nats.Msg) {
	ev, err := events.ParseStored(m.Data)
	if err != nil || !supportLines[ev.Type] || demoLines[ev.Type] {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, "  %-10s %4d  %s\n", p.name(ev.Session), ev.Seq, events.Summary(ev))
}

// serveShop serves the shop's tools in this process, on a connection of
// the tool runner's identity (as every custom tool server connects), until
// the run closes.
func serveShop(ctx context.Context, run *demoRun, task retail.Task, log *slog.Logger) error {
	opts := []nats.Option{nats.Name("rath-demo-shop")}
	if run.rt.Identities != nil {
		creds, _, err := auth.Options(run.rt.Identities.Path(auth.RoleToolRunner))
		if err != nil {
			return fmt.Errorf("demo: shop credentials: %w", err)
		}
		opts = append(opts, creds...)
	}
	if run.rt.Server != nil {
		opts = append(opts, nats.InProcessServer(run.rt.Server))
	}
	nc, err := nats.Connect(run.rt.URL, opts...)
	if err != nil {
		return fmt.Errorf("demo: shop connection: %w", err)
	}
	c, err := client.New(nc, client.As(events.Service("tool-runner")), client.WithSource("rath/tool/shop"), client.WithRetryFor(30*time.Second))
	if err != nil {
		nc.Close()
		return err
	}
	shop := retail.NewServer(c, []retail.Task{task}, log.With("service", "shop"))
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := shop.Serve(sctx, nc, toolserver.WithLogger(log.With("service", "shop"))); err != nil {
			log.Error("shop stopped", "err", err)
		}
	}()
	// The shop stops before the runtime (cleanups run last first).
	run.cleanup = append(run.cleanup, func() {
		stop()
		<-done
		nc.Close()
	})
	return nil
}

// taskWorkflow writes the workflow of one task into dir, never into the
// example (which may be the repository's): the customer's system prompt is
// the task's instruction, and both agents' scripts are the task's, copied
// to dir/tasks/ID/ as the workflow names them. It returns the workflow's
// path.
func taskWorkflow(example, dir string, t retail.Task) (string, error) {
	path := filepath.Join(example, "workflow.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil || len(doc.Content) == 0 {
		return "", fmt.Errorf("%s: %v", path, err)
	}
	agents := mappingValue(doc.Content[0], "agents")
	if agents == nil || agents.Kind != yaml.SequenceNode {
		return "", fmt.Errorf("%s: no agents list", path)
	}
	found := map[string]bool{}
	for _, agent := range agents.Content {
		name := mappingValue(agent, "name")
		if name == nil {
			continue
		}
		switch name.Value {
		case "customer":
			setMapping(agent, "system", t.Instruction)
			setMapping(agent, "script", filepath.ToSlash(filepath.Join("tasks", t.ID, retail.FileCustomer)))
		case "assistant":
			setMapping(agent, "script", filepath.ToSlash(filepath.Join("tasks", t.ID, retail.FileAssistant)))
		default:
			continue
		}
		found[name.Value] = true
	}
	if !found["customer"] || !found["assistant"] {
		return "", fmt.Errorf("%s: the support workflow needs agents named customer and assistant", path)
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		return "", err
	}
	scripts := filepath.Join(dir, "tasks", t.ID)
	if err := os.MkdirAll(scripts, 0o755); err != nil {
		return "", err
	}
	for _, f := range []string{retail.FileCustomer, retail.FileAssistant} {
		raw, err := os.ReadFile(filepath.Join(t.Dir, f))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(scripts, f), raw, 0o644); err != nil {
			return "", err
		}
	}
	dst := filepath.Join(dir, "workflow.yaml")
	return dst, os.WriteFile(dst, out, 0o644)
}

// printSupport prints what the dossier says of the conversation: each
// turn, each call's end and changes, and the grade.
func printSupport(a *app, d *dossier.Dossier) {
	calls := map[string][]dossier.ToolCall{}
	for _, t := range d.ToolCalls {
		calls[t.TurnID] = append(calls[t.TurnID], t)
	}
	fmt.Fprintf(a.Stdout, "the conversation:\n")
	for _, t := range d.Turns {
		if t.Status != dossier.TurnCompleted {
			continue
		}
		if answer := strings.TrimSpace(t.Answer); answer != "" {
			fmt.Fprintf(a.Stdout, "  %-9s %s\n", t.Agent+":", oneLine(answer, 160))
		}
		for _, c := range calls[t.TurnID] {
			end := "ok"
			switch {
			case c.Status != dossier.ToolFailed:
			case strings.HasPrefix(c.Error, "policy ") || strings.Contains(c.Error, "(approval "):
				end = "REFUSED: " + c.Error // by the shop's policy, or by a gate
			default:
				end = "FAILED: " + c.Error
			}
			fmt.Fprintf(a.Stdout, "  %9s   %s %s: %s\n", "", c.Tool, oneLine(string(c.Arguments), 160), end)
			for _, ch := range dossier.StateChanges(c) {
				fmt.Fprintf(a.Stdout, "  %9s     changed %s: %s -> %s\n", "", ch.Path, orNone(string(ch.Before)), orNone(string(ch.After)))
			}
		}
	}
	fmt.Fprintf(a.Stdout, "the grade:\n")
	for _, v := range d.Validations {
		verdict := "passed"
		if !v.Passed {
			verdict = "FAILED: " + v.Reason
		}
		fmt.Fprintf(a.Stdout, "  %-13s %s\n", v.Validator, verdict)
	}
}
