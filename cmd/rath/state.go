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

	"github.com/openrath/rath/pkg/session"
)

func (a *app) stateCmd() *cobra.Command {
	var at uint64
	cmd := &cobra.Command{
		Use:   "state SESSION",
		Short: "Summarise a session's folded state (at its head or at --at N)",
		Long: `state prints a summary of a session's state: status, lineage, head,
transcript, usage by agent and model, pending work, tools, sandbox and
memory. --at N folds only up to sequence N. --json prints the whole state.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			st, err := c.State(cmd.Context(), args[0], at)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(st)
			}
			return writeState(a.Stdout, st)
		},
	}
	cmd.Flags().Uint64Var(&at, "at", 0, "fold up to this sequence (0: the head)")
	return cmd
}

// writeState prints the human summary of a state.
func writeState(w io.Writer, st *session.State) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...)) }
	opt := func(k, v string) {
		if v != "" {
			row(k, "%s", v)
		}
	}
	row("session", "%s", st.ID)
	status := string(st.Status)
	if st.Outcome != "" || st.CloseReason != "" {
		status += " (" + strings.TrimSpace(st.Outcome+" "+st.CloseReason) + ")"
	}
	row("status", "%s", status)
	opt("workflow", strings.TrimSpace(st.Workflow+" "+st.WorkflowHash))
	opt("task", clip(st.Task, 100))
	opt("labels", joinLabels(st.Labels))
	row("head", "seq %d  hash %s", st.Seq, orNone(st.Hash))
	row("created", "%s  updated %s", stamp(st.Created), stamp(st.Updated))
	if l := st.Lineage; l.Parent != "" {
		row("lineage", "forked from %s@%d (%s)%s", l.Parent, l.ForkSeq, short(l.ForkHash), prefixed(": ", l.ForkReason))
	} else {
		row("lineage", "root")
	}
	for _, m := range st.Lineage.Merges {
		row("merged", "%s@%d at %d (%d events, ancestor %s@%d)", m.Source, m.SourceSeq, m.Seq, m.Events, orNone(m.Ancestor), m.AncestorSeq)
	}
	n := st.Counts
	row("events", "%d (model calls %d, tool calls %d, merged in %d)", n.Events, n.ModelCalls, n.ToolCalls, n.Merged)
	row("chunks", "%d (compactions %d)", len(st.Chunks), len(st.Compactions))
	u := st.Usage
	row("usage", "%s", tokens(u.Total))
	for _, k := range slices.Sorted(maps.Keys(u.ByAgent)) {
		row("  agent "+k, "%s", tokens(u.ByAgent[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(u.ByModel)) {
		row("  model "+k, "%s", tokens(u.ByModel[k]))
	}
	row("pending", "%d", len(st.Pending))
	for _, id := range slices.Sorted(maps.Keys(st.Pending)) {
		p := st.Pending[id]
		row("  "+id, "%s at %d%s%s", p.Kind, p.Seq, prefixed(" for ", p.Assignee), prefixed(": ", clip(p.Description, 60)))
	}
	waiting := 0
	for _, ap := range st.Approvals {
		if ap.Outcome == "" {
			waiting++
		}
	}
	if len(st.Approvals) > 0 {
		row("approvals", "%d (%d waiting)", len(st.Approvals), waiting)
	}
	row("tools", "%d", len(st.Tools))
	for _, id := range slices.Sorted(maps.Keys(st.Tools)) {
		t := st.Tools[id]
		line := fmt.Sprintf("%s %s, %d attempts", t.Tool, t.Status, t.Attempts)
		if t.Status == session.ToolCompleted || t.Status == session.ToolFailed {
			line += fmt.Sprintf(", exit %d", t.ExitCode)
		}
		row("  "+id, "%s%s", line, prefixed(": ", clip(t.Error, 60)))
	}
	if s := st.Sandbox; s != nil {
		row("sandbox", "%s/%s at %d%s%s", s.Backend, s.SandboxID, s.Seq, prefixed(" host ", s.Host), prefixed(" workspace ", s.Workspace))
	} else {
		row("sandbox", "none")
	}
	row("memory", "%d events", len(st.Memory))
	if len(st.Decisions) > 0 || len(st.Validations) > 0 {
		passed := 0
		for _, v := range st.Validations {
			if v.Passed {
				passed++
			}
		}
		row("control", "%d routing decisions, %d validations (%d passed)", len(st.Decisions), len(st.Validations), passed)
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
