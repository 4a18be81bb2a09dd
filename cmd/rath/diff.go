package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/internal/replay"
	"github.com/openrath/rath/pkg/session"
)

func (a *app) diffCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "diff A B",
		Short: "Compare two sessions or branches: events, tool effects, outcomes, usage",
		Long: `diff compares two sessions, typically two branches of one tree (a rejected
branch and the accepted one, or a session and a what-if fork of it): their
events after their common ancestor aligned by sequence ("=" where the two
are the same in normalised form, see docs/replay.md), the files their tool
calls changed with the diffs, their outcomes and validations, and their
token usage by agent and model after the common ancestor.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			d, err := replay.ReadContrast(cmd.Context(), c, args[0], args[1])
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(d)
			}
			printContrast(a.Stdout, d)
			return nil
		},
	}
}

// printContrast prints a comparison for people.
func printContrast(w io.Writer, d replay.Contrast) {
	fmt.Fprintf(w, "A %s (head %d)\nB %s (head %d)\n", d.A.Session, d.A.Head, d.B.Session, d.B.Head)
	if d.Common > 0 {
		fmt.Fprintf(w, "common ancestry: sequences 1..%d\n", d.Common)
	} else {
		fmt.Fprintln(w, "no common ancestry")
	}

	fmt.Fprintf(w, "\noutcome\n")
	for _, s := range []struct {
		name string
		side replay.Side
	}{{"A", d.A}, {"B", d.B}} {
		out := s.side.Status
		if s.side.Outcome != "" {
			out += " " + s.side.Outcome
		}
		if s.side.Reason != "" {
			out += " (" + s.side.Reason + ")"
		}
		fmt.Fprintf(w, "  %s %s\n", s.name, out)
		for _, v := range s.side.Validations {
			verdict := "passed"
			if !v.Passed {
				verdict = "FAILED: " + oneLine(v.Reason, 70)
			}
			fmt.Fprintf(w, "    seq %d validation %s %s\n", v.Seq, v.Validator, verdict)
		}
	}

	fmt.Fprintf(w, "\nfiles changed\n")
	if len(d.Files) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, f := range d.Files {
		switch {
		case f.Where != "both":
			fmt.Fprintf(w, "  %s: only in %s\n", f.File, strings.ToUpper(f.Where))
		case f.Same:
			fmt.Fprintf(w, "  %s: same change in both\n", f.File)
		default:
			fmt.Fprintf(w, "  %s: changed differently\n", f.File)
		}
		if f.A != "" && !f.Same {
			fmt.Fprintf(w, "    A:\n%s", indent(f.A, "      "))
		}
		if f.B != "" {
			label := "B"
			if f.Same {
				label = "A and B"
			}
			fmt.Fprintf(w, "    %s:\n%s", label, indent(f.B, "      "))
		}
	}

	fmt.Fprintf(w, "\nusage after the common ancestry (tokens in+out, calls)\n")
	printUsage(w, d.A.Usage, d.B.Usage)

	fmt.Fprintf(w, "\nevents after the common ancestry (%d of %s the same)\n", d.SameEvents, plural(len(d.Events), "aligned pair", "aligned pairs"))
	for _, p := range d.Events {
		mark := "≠"
		if p.Same {
			mark = "="
		}
		fmt.Fprintf(w, "  %4d %s A %s\n", p.Seq, mark, briefLine(p.A))
		fmt.Fprintf(w, "         B %s\n", briefLine(p.B))
	}
}

func briefLine(b *replay.Brief) string {
	if b == nil {
		return "—"
	}
	if b.Summary == "" {
		return b.Type
	}
	return b.Type + ": " + b.Summary
}

func printUsage(w io.Writer, a, b session.Usage) {
	row := func(name string, x, y session.Tokens) {
		fmt.Fprintf(w, "  %-28s A %7d (%d)   B %7d (%d)\n", name, x.In+x.Out, x.Calls, y.In+y.Out, y.Calls)
	}
	row("total", a.Total, b.Total)
	for _, k := range unionKeys(a.ByAgent, b.ByAgent) {
		row("agent "+k, a.ByAgent[k], b.ByAgent[k])
	}
	for _, k := range unionKeys(a.ByModel, b.ByModel) {
		row("model "+k, a.ByModel[k], b.ByModel[k])
	}
}

func unionKeys(a, b map[string]session.Tokens) []string {
	var out []string
	for k := range a {
		out = append(out, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
