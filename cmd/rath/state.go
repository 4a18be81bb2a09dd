package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

func (a *app) stateCmd() *cobra.Command {
	var (
		at         uint64
		tail, clip int
		full       bool
	)
	cmd := &cobra.Command{
		Use:   "state SESSION",
		Short: "Summarise a session's folded state (at its head or at --at N)",
		Long: `state prints the ledger's overview of a session: status, lineage, head,
usage by agent and model, pending work, approvals, tool calls in flight and
the last ones, sandbox, and the counts and last entries of the transcript,
compactions, decisions, validations and memory events. The overview is
bounded whatever the session holds: --tail N entries of each long list, each
chunk's content clipped to --clip bytes (the whole chunk is the event at its
seq: rath log SESSION --from SEQ --limit 1). --at N folds only up to
sequence N. --json prints the overview as the ledger answers it.

--full asks the ledger for the whole state (in parts when it exceeds a
message: as large as the session's transcript); with --json it prints the
whole state.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tail < 0 || tail > session.MaxTail {
				return usageError{fmt.Errorf("--tail %d: want 0 (the default, %d) to %d", tail, session.DefaultTail, session.MaxTail)}
			}
			if clip < 0 || clip > session.MaxClip {
				return usageError{fmt.Errorf("--clip %d: want 0 (the default, %d) to %d", clip, session.DefaultClip, session.MaxClip)}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			opts := session.OverviewOptions{Tail: tail, Clip: clip}
			var v *session.Overview
			if full {
				st, err := c.StateAt(cmd.Context(), args[0], at)
				if err != nil {
					return err
				}
				if a.json {
					return a.printJSON(st)
				}
				v = st.Overview(opts)
			} else if v, err = c.Overview(cmd.Context(), api.StateRequest{Session: args[0], At: at, Tail: tail, Clip: clip}); err != nil {
				return err
			}
			if a.json {
				return a.printJSON(v)
			}
			return writeState(a.Stdout, v)
		},
	}
	cmd.Flags().Uint64Var(&at, "at", 0, "fold up to this sequence (0: the head)")
	cmd.Flags().IntVar(&tail, "tail", 0, fmt.Sprintf("last entries of each long list (0: %d, at most %d)", session.DefaultTail, session.MaxTail))
	cmd.Flags().IntVar(&clip, "clip", 0, fmt.Sprintf("bytes of each chunk's content (0: %d, at most %d)", session.DefaultClip, session.MaxClip))
	cmd.Flags().BoolVar(&full, "full", false, "ask the ledger for the whole state instead of its overview")
	return cmd
}

// writeState prints the human summary of an overview.
func writeState(w io.Writer, v *session.Overview) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...)) }
	opt := func(k, v string) {
		if v != "" {
			row(k, "%s", v)
		}
	}
	more := func(n int) string {
		if n > 0 {
			return fmt.Sprintf(" (%d more)", n)
		}
		return ""
	}
	row("session", "%s", v.ID)
	status := string(v.Status)
	if v.Outcome != "" || v.CloseReason != "" {
		status += " (" + strings.Join(nonEmpty(v.Outcome, v.CloseReason), ": ") + ")"
	}
	row("status", "%s", status)
	opt("workflow", strings.TrimSpace(v.Workflow+" "+v.WorkflowHash))
	opt("task", clip(v.Task, 100))
	opt("labels", joinLabels(v.Labels)+more(v.LabelsOmitted))
	row("head", "seq %d  hash %s", v.Seq, orNone(v.Hash))
	row("created", "%s  updated %s", stamp(v.Created), stamp(v.Updated))
	if l := v.Lineage; l.Parent != "" {
		row("lineage", "forked from %s@%d (%s)%s", l.Parent, l.ForkSeq, short(l.ForkHash), prefixed(": ", l.ForkReason))
	} else {
		row("lineage", "root")
	}
	if n := v.Lineage.Merges.Count - len(v.Lineage.Merges.Last); n > 0 {
		row("merged", "%s", plural(n, "earlier merge", "earlier merges"))
	}
	for _, m := range v.Lineage.Merges.Last {
		row("merged", "%s@%d at %d (%d events, ancestor %s@%d)", m.Source, m.SourceSeq, m.Seq, m.Events, orNone(m.Ancestor), m.AncestorSeq)
	}
	n := v.Counts
	row("events", "%d (model calls %d, tool calls %d, merged in %d)", n.Events, n.ModelCalls, n.ToolCalls, n.Merged)
	row("chunks", "%d, %s (compactions %d)", v.Chunks.Count, fmtSize(v.Chunks.Bytes), v.Compactions.Count)
	for _, ch := range v.Chunks.Last {
		line := clip(ch.Content, 80)
		if ch.Clipped || len(ch.Content) > 80 {
			line += fmt.Sprintf(" [%s]", fmtSize(int64(ch.Size)))
		}
		row(fmt.Sprintf("  %d", ch.Seq), "%s%s: %s", ch.Role, prefixed(" ", ch.Agent), line)
	}
	if v.Turn != nil {
		row("turn", "%s of %s since %d", v.Turn.ID, v.Turn.Agent, v.Turn.Seq)
	}
	u := v.Usage
	row("usage", "%s", tokens(u.Total))
	for _, k := range slices.Sorted(maps.Keys(u.ByAgent)) {
		row("  agent "+k, "%s", tokens(u.ByAgent[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(u.ByModel)) {
		row("  model "+k, "%s", tokens(u.ByModel[k]))
	}
	row("pending", "%d", len(v.Pending)+v.PendingOmitted)
	for _, p := range v.Pending {
		row("  "+p.ID, "%s at %d%s%s", p.Kind, p.Seq, prefixed(" for ", p.Assignee), prefixed(": ", clip(p.Description, 60)))
	}
	if ap := v.Approvals; ap.Count > 0 {
		row("approvals", "%d (%d waiting)", ap.Count, ap.WaitingCount)
		for _, e := range ap.Waiting {
			row("  "+e.ID, "waiting since %d: %s", e.Seq, clip(e.Action, 60))
		}
	}
	t := v.Tools
	row("tools", "%d (%d open)", t.Count, t.OpenCount)
	shown := map[string]bool{}
	for _, e := range append(slices.Clone(t.Open), t.Last...) {
		if shown[e.CallID] {
			continue
		}
		shown[e.CallID] = true
		line := fmt.Sprintf("%s %s, %s", e.Tool, e.Status, plural(e.Attempts, "attempt", "attempts"))
		if e.Status == session.ToolCompleted || e.Status == session.ToolFailed {
			line += fmt.Sprintf(", exit %d", e.ExitCode)
		}
		row("  "+e.CallID, "%s%s", line, prefixed(": ", clip(e.Error, 60)))
	}
	if s := v.Sandbox; s != nil {
		row("sandbox", "%s/%s at %d%s%s", s.Backend, s.SandboxID, s.Seq, prefixed(" host ", s.Host), prefixed(" workspace ", s.Workspace))
		row("  isolation", "%s", isolationText(s.Backend, s.Isolation))
		if s.Pool != "" || s.Runner != "" {
			row("  pool", "%s%s", events.PoolOf(s.Pool), prefixed(", runner ", s.Runner))
		}
	} else {
		row("sandbox", "none")
	}
	if m := v.Moving; m != nil {
		to := m.Backend
		if m.Pool != "" {
			to = m.Pool + "/" + m.Backend
		}
		row("moving", "to %s, asked at %d: no tool runner has answered yet; the session's later calls wait for it", to, m.Seq)
	}
	row("memory", "%s", plural(v.Memory.Count, "event", "events"))
	if v.Decisions.Count > 0 || v.Validations.Count > 0 {
		row("control", "%s, %s (%d passed)", plural(v.Decisions.Count, "routing decision", "routing decisions"), plural(v.Validations.Count, "validation", "validations"), n.ValidationsPassed)
	}
	return tw.Flush()
}

func tokens(t session.Tokens) string {
	return fmt.Sprintf("in %d  out %d  calls %d", t.In, t.Out, t.Calls)
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return orNone(hash)
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func prefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// fmtSize prints a byte count in B, KiB or MiB.
func fmtSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// nonEmpty is the strings that are not empty, in order.
func nonEmpty(s ...string) []string {
	var out []string
	for _, v := range s {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}
