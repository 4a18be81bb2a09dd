package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/spf13/cobra"

	"github.com/openrath/rath/internal/egress"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

func (a *app) startCmd() *cobra.Command {
	var (
		id, wfFile, workspace string
		data                  events.SessionStarted
		labelf                []string
		allowNet              egress.Allowlist
		unregistered          bool
	)
	cmd := &cobra.Command{
		Use:   "start",
		Short: "Start a session and print its ID",
		Long: `start starts a session. With --workflow FILE the session runs that workflow:
the file and the scripts it names are stored as one bundle in the object
store, and the session records the workflow's name, the file's hash and the
bundle's reference; the selector then routes it. --workspace DIR seeds the
session's tool workspace from DIR, a directory here: the command packs it
(without .git) and stores it in the object store, and the tool runner
unpacks it; it reads no path on its own host.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if data.Labels, err = labels(labelf); err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			if workspace != "" {
				if err := c.SeedWorkspace(cmd.Context(), workspace, &data); err != nil {
					return err
				}
			}
			if wfFile != "" {
				wf, err := loadWorkflow(wfFile, workflow.AllowNet(allowNet))
				if err != nil {
					return usageError{err}
				}
				if !unregistered {
					if err := a.checkTools(cmd.Context(), c, wfFile, wf); err != nil {
						return err
					}
				}
				if err := storeWorkflow(cmd.Context(), c, wf, &data); err != nil {
					return err
				}
			}
			ack, err := c.Start(cmd.Context(), id, data)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(ack)
			}
			_, err = fmt.Fprintln(a.Stdout, ack.Session)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&id, "id", "", "session ID (default: the ledger chooses one)")
	f.StringVar(&data.Task, "task", "", "what the session is for")
	f.StringVar(&wfFile, "workflow", "", "workflow file to run (see docs/workflows.md)")
	f.StringVar(&workspace, "workspace", "", "directory to seed the session's tool workspace from (packed and uploaded)")
	f.StringArrayVar(&labelf, "label", nil, "label key=value (repeatable)")
	f.BoolVar(&unregistered, "allow-unregistered-tools", false, "start even if an agent's tool is offered by no tool runner or tool server yet (its turns wait for it, then fail)")
	f.Var(&allowNet, "sandbox-allow-net", "non-public destinations the tool runner's operator allows (its --sandbox-allow-net): the workflow's network lists may name them; the runner checks them again")
	return cmd
}

func (a *app) emitCmd() *cobra.Command {
	var (
		data   string
		expect uint64
	)
	cmd := &cobra.Command{
		Use:   "emit SESSION TYPE",
		Short: "Append an event of any registered type to a session",
		Long: `emit proposes one event to the session ledger, which validates its data
against the type's JSON Schema (see "rath schema TYPE") and appends it.

--data is the event data as JSON, @FILE to read it from a file, or @- to
read it from stdin (default {}). With --expect-seq N the ledger refuses the
event unless the session's head is N.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			body, err := readData(data, cmd.InOrStdin())
			if err != nil {
				return err
			}
			ev, err := newEvent(args[0], args[1], body)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("expect-seq") {
				events.WithExpectedSeq(expect)(&ev)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			ack, err := c.Append(cmd.Context(), ev)
			if err != nil {
				return err
			}
			return a.printAck(ack)
		},
	}
	f := cmd.Flags()
	f.StringVar(&data, "data", "{}", "event data: JSON, @FILE or @- (stdin)")
	f.Uint64Var(&expect, "expect-seq", 0, "refuse unless the session's head sequence is N")
	return cmd
}

// newEvent builds a proposal with raw JSON data. Unlike client.Emit it takes
// the type as a string and the data as written, so that the ledger checks
// exactly what the user wrote, unknown types and extra fields included.
func newEvent(sessionID, typ string, data []byte) (event.Event, error) {
	ev := event.New()
	ev.SetID(events.NewID())
	ev.SetSource("rath/cli")
	ev.SetType(typ)
	ev.SetSubject(sessionID)
	ev.SetTime(time.Now().UTC())
	if k, ok := events.Lookup(typ); ok {
		ev.SetDataSchema(k.DataSchema())
	}
	// A json.RawMessage is encoded as JSON data; a []byte would become
	// data_base64 (which the ledger accepts, but JSON data reads better).
	if err := ev.SetData(event.ApplicationJSON, json.RawMessage(data)); err != nil {
		return event.Event{}, usageError{fmt.Errorf("--data: %w", err)}
	}
	return ev, nil
}

// readData resolves --data: inline JSON, @FILE or @- for stdin.
func readData(arg string, stdin io.Reader) ([]byte, error) {
	var (
		b   []byte
		err error
	)
	switch {
	case arg == "@-":
		b, err = io.ReadAll(stdin)
	case strings.HasPrefix(arg, "@"):
		b, err = os.ReadFile(arg[1:])
	default:
		b = []byte(arg)
	}
	if err != nil {
		return nil, fmt.Errorf("--data: %w", err)
	}
	if !json.Valid(b) {
		return nil, usageError{fmt.Errorf("--data %s is not valid JSON", clip(arg, 40))}
	}
	return b, nil
}

// printAck prints what an append, fork or merge stored.
func (a *app) printAck(ack api.Ack) error {
	if a.json {
		return a.printJSON(ack)
	}
	dup := ""
	if ack.Duplicate {
		dup = " (duplicate: stored before)"
	}
	_, err := fmt.Fprintf(a.Stdout, "%s %d %s%s\n", ack.Session, ack.Seq, ack.Hash, dup)
	return err
}

// checkTools refuses a workflow (loaded from path) whose agents name a
// tool that nobody offers: not in the tool registry, and not a tool of an MCP server the
// workflow declares (the tool runner lists those when the session starts).
// Before any tool runner has registered its built-in tools (a deployment
// still starting) nothing can be known: it says so and lets the start go.
func (a *app) checkTools(ctx context.Context, c *client.Client, path string, wf *workflow.Workflow) error {
	tools, err := c.Tools(ctx)
	if err != nil {
		return err
	}
	registered, runner := map[string]bool{}, false
	for _, t := range tools {
		registered[t.Name] = true
		runner = runner || t.Server == "tool-runner"
	}
	var missing []string
	for _, ag := range wf.Agents {
		for _, name := range ag.Tools {
			if registered[name] {
				continue
			}
			if server, _, ok := strings.Cut(name, "."); ok {
				if _, declared := wf.MCPServer(server); declared {
					continue
				}
			}
			missing = append(missing, fmt.Sprintf("%s (agent %s)", name, ag.Name))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if !runner {
		fmt.Fprintf(a.Stderr, "rath: no tool runner has registered its tools yet: the tools of %s are not checked (%s)\n", path, strings.Join(missing, ", "))
		return nil
	}
	names := make([]string, 0, len(tools))
	for _, t := range tools {
		names = append(names, t.Name)
	}
	return usageError{fmt.Errorf("workflow %s: no tool runner or tool server offers %s (registered: %s): start the tool's server first (docs/tools.md), fix the name, or pass --allow-unregistered-tools to start anyway (the agent's turns wait for the tool, then fail)",
		path, strings.Join(missing, ", "), strings.Join(names, ", "))}
}

// loadWorkflow parses a workflow file and checks that its scripts can be
// read. Its errors name the file.
func loadWorkflow(path string, opts ...workflow.Option) (*workflow.Workflow, error) {
	wf, err := workflow.Load(path, opts...)
	if err != nil {
		return nil, err
	}
	if err := wf.CheckScripts(); err != nil {
		return nil, err
	}
	return wf, nil
}

// uploadWorkflow parses a workflow file, stores it with its scripts as one
// bundle and names it in the session start.
func uploadWorkflow(ctx context.Context, c *client.Client, path string, data *events.SessionStarted, opts ...workflow.Option) error {
	wf, err := loadWorkflow(path, opts...)
	if err != nil {
		return usageError{err}
	}
	return storeWorkflow(ctx, c, wf, data)
}

// storeWorkflow stores a loaded workflow with its scripts as one bundle and
// names it in the session start.
func storeWorkflow(ctx context.Context, c *client.Client, wf *workflow.Workflow, data *events.SessionStarted) error {
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
