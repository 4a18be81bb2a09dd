package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/internal/replay"
	"github.com/openrath/rath/internal/rerun"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// replayOptions are the flags of rath replay.
type replayOptions struct {
	workflow string
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

func (a *app) replay(ctx context.Context, session string, o replayOptions) error {
	// A workflow that does not load fails here, before any runtime starts
	// or the original is read.
	var wf *workflow.Workflow
	if o.workflow != "" {
		var err error
		if wf, err = loadWorkflow(o.workflow); err != nil {
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
	rep, err := rerun.Reexecute(ctx, c, orig, rerun.Options{Workflow: wf, WorkflowFile: o.workflow,
		Data: o.data, KeepData: o.keepData, Wait: o.wait, Idle: o.idle, Runtime: privateBase(), Progress: a.Stderr})
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

// printReplay prints a replay's verdict for people.
func printReplay(w io.Writer, rep *rerun.Report) {
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

// whatIf forks the session at o.from in the original system and continues
// the fork live (rerun.WhatIf), then prints the comparison of the session
// and the branch that closed.
func (a *app) whatIf(ctx context.Context, session string, o replayOptions) error {
	if o.from == 0 {
		return usageError{errors.New("--fork needs --from N: the last sequence the fork shares with the session")}
	}
	if o.workflow != "" {
		return usageError{errors.New("--workflow applies to a replay, not to a what-if fork (the fork keeps its session's workflow; --provider and --model change its agents' model)")}
	}
	if o.live.provider != "" {
		if _, err := liveWorkflowCheck(o.live); err != nil {
			return usageError{err}
		}
	} else if o.live.model != "" || o.live.baseURL != "" {
		return usageError{errors.New("--model and --base-url need --provider")}
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	res, err := rerun.WhatIf(ctx, c, session, rerun.WhatIfOptions{From: o.from, ID: o.id,
		Provider: o.live.provider, Model: o.live.model, BaseURL: o.live.baseURL, Wait: o.wait, Progress: a.Stderr})
	var open *rerun.NotClosedError
	if errors.As(err, &open) {
		return fmt.Errorf("what-if fork %s: not closed (%w); compare later with: %s diff %s %s", open.Fork, open.Err, a.self(), session, open.Fork)
	}
	var failed *rerun.TurnFailedError
	if errors.As(err, &failed) {
		return &causedError{fmt.Sprintf("what-if fork %s of %s: the turn of %s failed: %s\nThe fork is closed (outcome failed) and stays in the record as %s; once the cause is fixed, %s",
			failed.Fork, session, failed.Agent, failed.Reason, failed.Fork, a.retryWhatIf(ctx, c, o.id)), err}
	}
	if o.id != "" && errors.Is(err, api.ErrExists) {
		return a.takenWhatIf(ctx, c, session, o.id, err)
	}
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(res.Contrast)
	}
	printContrast(a.Stdout, res.Contrast)
	fmt.Fprintf(a.Stdout, "\ncompare again with: %s diff %s %s\n", a.self(), session, res.Last)
	return nil
}

// retryWhatIf says how to run a what-if again after one under id ("": the
// ledger's choice) was recorded: a session ID is never reused, so with
// another --id, one that is free now.
func (a *app) retryWhatIf(ctx context.Context, c *client.Client, id string) string {
	if id == "" {
		return "run the same command again (the ledger names a new fork)"
	}
	if free := freeID(ctx, c, id); free != "" {
		return fmt.Sprintf("run it with --id %s (a session ID is never reused), or without --id", free)
	}
	return "run it with another --id (a session ID is never reused), or without --id"
}

// takenWhatIf explains a what-if refused because its --id names a session
// that exists: above all the fork of an earlier what-if that failed.
func (a *app) takenWhatIf(ctx context.Context, c *client.Client, session, id string, err error) error {
	ov, oerr := c.Overview(ctx, api.StateRequest{Session: id})
	if oerr != nil || ov.Lineage.Parent != session || !strings.HasPrefix(ov.Lineage.ForkReason, "what-if:") {
		return err // forPeople words the refusal
	}
	what := fmt.Sprintf("an earlier what-if of %s at %d", session, ov.Lineage.ForkSeq)
	if ov.Status.Ended() && ov.Outcome != "" {
		what += fmt.Sprintf(" (closed, outcome %s: '%s state %s' says why)", ov.Outcome, a.self(), id)
	}
	return &causedError{fmt.Sprintf("session %s exists already (session_exists): it is %s, and stays in the record; %s", id, what, a.retryWhatIf(ctx, c, id)), err}
}

// freeID is the first of id-2, id-3, … (or, for an id ending in -N, of
// N+1, N+2, …) that names no session, or "" when the ledger does not say.
func freeID(ctx context.Context, c *client.Client, id string) string {
	base, n := id, 2
	if i := strings.LastIndexByte(id, '-'); i > 0 {
		if k, err := strconv.Atoi(id[i+1:]); err == nil && k > 0 {
			base, n = id[:i], k+1
		}
	}
	for end := n + 20; n < end; n++ {
		next := fmt.Sprintf("%s-%d", base, n)
		_, err := c.Overview(ctx, api.StateRequest{Session: next})
		switch {
		case errors.Is(err, api.ErrNotFound):
			return next
		case err != nil:
			return ""
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
