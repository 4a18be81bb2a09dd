package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/internal/dossier"
	"github.com/openrath/rath/pkg/client"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

func (a *app) forkCmd() *cobra.Command {
	var (
		req        api.ForkRequest
		labelf     []string
		say        string
		toolResult string
		exitCode   int
	)
	cmd := &cobra.Command{
		Use:   "fork SESSION",
		Short: "Branch a session after sequence --at (default its head) and print the new ID; with --say or --tool-result, correct it there and resume",
		Long: `fork branches SESSION after sequence --at (default its head) and prints the
fork's ID.

With --say or --tool-result it also corrects the fork, and the agent loop
resumes there (rewind, correct, resume): --say "…" appends your message to the
agents (a user message marked correction), and the selector gives the agent
of the last turn its next turn; --tool-result CALLID=TEXT records TEXT (and
--exit-code) as the result of tool call CALLID, requested and not finished at
--at, in place of running it, and that agent continues with it. Your identity
is recorded as the correction's author. --at must be between turns, with no
other tool call in flight; "rath log SESSION" shows where turns end.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if req.Labels, err = labels(labelf); err != nil {
				return err
			}
			req.Parent = args[0]
			if say != "" && toolResult != "" {
				return usageError{errors.New("give --say or --tool-result, not both")}
			}
			if cmd.Flags().Changed("exit-code") && toolResult == "" {
				return usageError{errors.New("--exit-code goes with --tool-result")}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			if say != "" || toolResult != "" {
				r := client.Correction{Session: req.Parent, At: req.At, ID: req.ID, Reason: req.Reason, Labels: req.Labels, Say: say, ExitCode: exitCode}
				if toolResult != "" {
					var ok bool
					if r.CallID, r.Result, ok = strings.Cut(toolResult, "="); !ok || r.CallID == "" {
						return usageError{fmt.Errorf("--tool-result %q: want CALLID=TEXT", toolResult)}
					}
				}
				done, err := c.Correct(cmd.Context(), r)
				if errors.Is(err, client.ErrNotResumable) {
					return usageError{err}
				}
				if err != nil {
					return err
				}
				if a.json {
					return a.printJSON(done)
				}
				_, err = fmt.Fprintf(a.Stdout, "%s\nforked %s at %d; correction at %d by %s; %s resumes\n", done.Fork.Session,
					req.Parent, done.Fork.Seq-1, done.Correction.Seq, c.Principal(), done.Agent)
				return err
			}
			ack, err := c.Fork(cmd.Context(), req)
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
	f.Uint64Var(&req.At, "at", 0, "last sequence the fork shares with its parent (0: the head)")
	f.StringVar(&req.ID, "id", "", "the fork's session ID (default: the ledger chooses one)")
	f.StringVar(&req.Reason, "reason", "", "why the fork was made")
	f.StringArrayVar(&labelf, "label", nil, "label key=value (repeatable)")
	f.StringVar(&say, "say", "", "correct the fork with this message to the agents, and resume")
	f.StringVar(&toolResult, "tool-result", "", "correct the fork with CALLID=TEXT, the result of a tool call in flight at --at, and resume")
	f.IntVar(&exitCode, "exit-code", 0, "the exit code of the --tool-result")
	return cmd
}

func (a *app) mergeCmd() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "merge TARGET SOURCE",
		Short: "Take the events of SOURCE that TARGET lacks into TARGET",
		Long: `merge appends a merge event to TARGET that takes in every event of SOURCE's
log whose content TARGET does not hold yet: not their shared fork ancestry,
not what an earlier merge (direct or through another session) took in. It
prints TARGET, the merge event's sequence and hash.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ack, err := c.Merge(cmd.Context(), api.MergeRequest{Target: args[0], Source: args[1], Reason: reason})
			if err != nil {
				return err
			}
			return a.printAck(ack)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the merge was made")
	return cmd
}

func (a *app) graphCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "graph SESSION",
		Short: "Draw the lineage tree around a session",
		Long: `graph draws the tree of sessions forked from SESSION's root: each line is
a session by the name the demo and its dossier give it (root; fork-N@S, the
Nth fork made in the tree, at sequence S; root-2… for the root of a tree a
merge took events from) and its ID, its status (and outcome), head and the
merges it took in (← merged SOURCE up to SEQ). SESSION is marked with ◀.
--json prints the lineage with the names by ID.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			g, err := c.Lineage(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			names, err := dossier.NamesOf(cmd.Context(), c, g)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(struct {
					api.Graph
					Names map[string]string `json:"names"`
				}{g, names})
			}
			return writeGraph(a.Stdout, g, names)
		},
	}
}

// writeGraph draws a lineage tree, one session a line, by its name
// (dossier.BranchNames) and ID:
//
//	root s1 (closed: succeeded, head 12)
//	└─ fork-1@5 s2 (active, head 9) ← merged fork-2@6 up to 7 ◀
//
// A session names lacks (forked since they were read) shows its ID and
// fork point alone.
func writeGraph(w io.Writer, g api.Graph, names map[string]string) error {
	if g.Root == nil {
		return nil
	}
	inTree := map[string]bool{}
	var mark func(n *api.Node)
	mark = func(n *api.Node) {
		inTree[n.Session] = true
		for _, c := range n.Children {
			mark(c)
		}
	}
	mark(g.Root)
	var b strings.Builder
	var walk func(n *api.Node, indent string, last, root bool)
	walk = func(n *api.Node, indent string, last, root bool) {
		child := indent
		if !root {
			if last {
				b.WriteString(indent + "└─ ")
				child += "   "
			} else {
				b.WriteString(indent + "├─ ")
				child += "│  "
			}
		}
		if name := names[n.Session]; name != "" {
			b.WriteString(name + " " + n.Session)
		} else {
			b.WriteString(n.Session)
			if !root {
				fmt.Fprintf(&b, " @%d", n.ForkSeq)
			}
		}
		status := orNone(n.Status)
		if n.Outcome != "" {
			status += ": " + n.Outcome
		}
		fmt.Fprintf(&b, " (%s, head %d)", status, n.Head)
		if len(n.Merges) > 0 {
			merged := make([]string, len(n.Merges))
			for i, m := range n.Merges {
				// A source in the tree has its own line, with its ID.
				source := dossier.Labelled(names, m.Source)
				if inTree[m.Source] && names[m.Source] != "" {
					source = names[m.Source]
				}
				merged[i] = fmt.Sprintf("%s up to %d", source, m.SourceSeq)
			}
			b.WriteString(" ← merged " + strings.Join(merged, ", "))
		}
		if n.Session == g.Session {
			b.WriteString(" ◀")
		}
		b.WriteByte('\n')
		for i, c := range n.Children {
			walk(c, child, i == len(n.Children)-1, false)
		}
	}
	walk(g.Root, "", true, true)
	_, err := io.WriteString(w, b.String())
	return err
}
