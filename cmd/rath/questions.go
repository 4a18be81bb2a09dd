package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/internal/dossier"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// auditSource is where an audit question reads the session graph: the
// ledger (SESSION) or an exported dossier (--dossier DIR, offline).
type auditSource struct {
	dir    string
	branch string
}

func (a *app) auditCmd() *cobra.Command {
	src := &auditSource{}
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Answer an auditor's question from a session graph (the ledger, or a dossier offline)",
		Long: `audit answers questions from the session graph alone: SESSION's tree read from
the ledger, or an exported dossier with --dossier DIR (checked first, as
"rath verify --dossier" does; no NATS needed). Each prints text, calling
branches by the dossier's names (root, fork-N@S) with their IDs, or JSON with
--json. A step is a sequence number of a branch's logical log (the rathseq
"rath log" prints); a turn counts the branch's agent turns from 1. --branch
chooses the branch whose logical log the step names (default SESSION, or the
session the dossier was exported for). See docs/dossier.md.`,
	}
	cmd.PersistentFlags().StringVar(&src.dir, "dossier", "", "answer from the dossier in DIR (offline) instead of the ledger")
	cmd.PersistentFlags().StringVar(&src.branch, "branch", "", "the branch whose logical log steps and turns count on, by its ID or its name (root, fork-1@22)")
	cmd.AddCommand(a.auditFinalCmd(src), a.auditRecalledCmd(src), a.auditModifiedCmd(src), a.auditRouteCmd(src), a.auditUsageCmd(src),
		a.auditApprovedCmd(src))
	return cmd
}

// open reads the dossier the question is about and the branch it names.
func (a *app) open(cmd *cobra.Command, src *auditSource, args []string) (*dossier.Dossier, string, error) {
	var d *dossier.Dossier
	switch {
	case src.dir != "" && len(args) > 0:
		return nil, "", usageError{errors.New("give SESSION or --dossier DIR, not both")}
	case src.dir != "":
		var err error
		if d, err = dossier.Open(src.dir); err != nil {
			if be := (*dossier.BrokenError)(nil); errors.As(err, &be) {
				return nil, "", dossierBroken(src.dir, be.Fault)
			}
			return nil, "", err
		}
	case len(args) == 1:
		c, err := a.client()
		if err != nil {
			return nil, "", err
		}
		if d, err = dossier.Build(cmd.Context(), c, args[0], dossier.Options{Blobs: a.blobReader(c), Log: a.warnLog()}); err != nil {
			return nil, "", err
		}
	default:
		return nil, "", usageError{errors.New("give SESSION, or --dossier DIR")}
	}
	branch := src.branch
	if branch == "" {
		branch = d.Session
	}
	// --branch names a branch by its ID or by its name (root, fork-1@22).
	i := slices.IndexFunc(d.Branches, func(b dossier.Branch) bool { return b.ID == branch })
	if i < 0 {
		i = slices.IndexFunc(d.Branches, func(b dossier.Branch) bool { return b.Name == branch })
	}
	if i < 0 {
		return nil, "", api.Errorf(api.CodeNotFound, "the session graph of %s holds no branch %s", d.Root, branch)
	}
	if src.branch != "" {
		src.branch = d.Branches[i].ID // as the questions take it
	}
	return d, d.Branches[i].ID, nil
}

// branchNames shows a dossier's branches by the names it gives them
// (dossier.BranchNames), as the demo and dossier.md do.
type branchNames map[string]string

func namesOf(d *dossier.Dossier) branchNames {
	n := branchNames{}
	for _, b := range d.Branches {
		n[b.ID] = b.Name
	}
	return n
}

// of is branch id's name, or id when it has none.
func (n branchNames) of(id string) string {
	if name := n[id]; name != "" {
		return name
	}
	return id
}

// full is branch id's name and ID, for the first mention in an answer.
func (n branchNames) full(id string) string { return dossier.Labelled(n, id) }

// text is s (a reason, a comment) with the long branch IDs it names
// replaced by their names, as dossier.md reads.
func (n branchNames) text(s string) string { return dossier.ReplaceIDs(s, n) }

// questionError maps a question's "no such step/branch" to the CLI's codes.
func questionError(err error) error {
	switch {
	case errors.Is(err, dossier.ErrNoStep):
		return api.Errorf(api.CodeOutOfRange, "%v", err)
	case errors.Is(err, dossier.ErrNoBranch):
		return api.Errorf(api.CodeNotFound, "%v", err)
	}
	return err
}

func (a *app) auditFinalCmd(src *auditSource) *cobra.Command {
	return &cobra.Command{
		Use:   "final [SESSION]",
		Short: "Which branch produced the final answer",
		Long: `final names the branch that produced the final answer: a branch closed with a
successful outcome (succeeded, success, passed, accepted, done, completed, ok,
resolved, fixed) whose last validation before the close passed; the latest
such close if several. Only when none qualifies is a successful close with no
validation at all accepted (printed as "unvalidated"). A branch whose last
validation failed never is. It prints the branch, its outcome, the closing
event and the validation that justified it.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, _, err := a.open(cmd, src, args)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(struct {
					Root  string         `json:"root"`
					Final *dossier.Final `json:"final"`
				}{d.Root, d.Final})
			}
			f, n := d.Final, namesOf(d)
			if f == nil {
				_, err := fmt.Fprintf(a.Stdout, "no final answer in the graph of %s: no branch was closed with a successful outcome after a passing validation\n", d.Root)
				return err
			}
			var b strings.Builder
			fmt.Fprintf(&b, "final answer: branch %s\n", n.full(f.Branch))
			fmt.Fprintf(&b, "  outcome:    %s\n", f.Outcome)
			fmt.Fprintf(&b, "  closed:     %s seq %d (event %s, %s): %s\n", n.of(f.Close.Branch), f.Close.Seq, f.Close.EventID, stamp(f.Close.Time), orNone(n.text(f.Reason)))
			if v := f.Validation; v != nil {
				fmt.Fprintf(&b, "  validation: %s passed at %s seq %d (event %s)\n", v.Validator, n.of(v.Branch), v.Seq, v.EventID)
				if len(v.Details) > 0 {
					fmt.Fprintf(&b, "  details:    %s\n", clip(string(v.Details), 300))
				}
			} else {
				b.WriteString("  validation: none (unvalidated)\n")
			}
			if len(f.Others) > 0 {
				others := make([]string, len(f.Others))
				for i, o := range f.Others {
					others[i] = n.full(o)
				}
				fmt.Fprintf(&b, "  also qualified: %s\n", strings.Join(others, ", "))
			}
			_, err = io.WriteString(a.Stdout, b.String())
			return err
		},
	}
}

func (a *app) auditRecalledCmd(src *auditSource) *cobra.Command {
	var (
		step uint64
		turn int
	)
	cmd := &cobra.Command{
		Use:   "recalled [SESSION] (--step N | --turn K)",
		Short: "Which memory items were recalled at step N (or in turn K), and why",
		Long: `recalled lists the memory recalls at step N of the branch's logical log: the
rath.memory.recalled event at N, or, when N is another event, every recall of
the agent turn in flight at N. --turn K asks for the recalls of the K-th agent
turn instead. For each recall: the items (ID, version, score), the query,
agent and turn, the selector decision that routed the turn, and the write of
each recalled version with its provenance when the graph holds it.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (step == 0) == (turn == 0) {
				return usageError{errors.New("give --step N or --turn K")}
			}
			d, branch, err := a.open(cmd, src, args)
			if err != nil {
				return err
			}
			var ans dossier.RecallAnswer
			if step > 0 {
				ans, err = d.Recalled(branch, step)
			} else {
				ans, err = d.RecalledInTurn(branch, turn)
			}
			if err != nil {
				return questionError(err)
			}
			if a.json {
				return a.printJSON(ans)
			}
			return writeRecalls(a.Stdout, ans, namesOf(d))
		},
	}
	cmd.Flags().Uint64Var(&step, "step", 0, "sequence number of the branch's logical log")
	cmd.Flags().IntVar(&turn, "turn", 0, "agent turn number of the branch's logical log (from 1)")
	return cmd
}

func writeRecalls(w io.Writer, ans dossier.RecallAnswer, n branchNames) error {
	var b strings.Builder
	if ans.Step > 0 {
		fmt.Fprintf(&b, "%s step %d (%s)", n.full(ans.Branch), ans.Step, ans.StepType)
	} else {
		fmt.Fprintf(&b, "%s", n.full(ans.Branch))
	}
	if t := ans.Turn; t != nil {
		end := "in flight"
		if t.To != 0 {
			end = fmt.Sprintf("to %d", t.To)
		}
		fmt.Fprintf(&b, ", turn %d (%s, %s, seq %d %s)", t.Number, t.Agent, t.TurnID, t.From, end)
	}
	fmt.Fprintf(&b, ": %s\n", plural(len(ans.Recalls), "recall", "recalls"))
	if dec := ans.Decision; dec != nil {
		fmt.Fprintf(&b, "  the turn was routed at seq %d by rule %s → %s: %s\n", dec.Seq, dec.Rule, dec.Route, orNone(n.text(dec.Reason)))
	}
	for _, r := range ans.Recalls {
		fmt.Fprintf(&b, "  recall at %s seq %d (event %s) by %s", n.of(r.Branch), r.Seq, r.EventID, orNone(r.Agent))
		if r.TurnID != "" {
			fmt.Fprintf(&b, " for turn %s", r.TurnID)
		}
		fmt.Fprintf(&b, ", query %q", r.Query)
		if len(r.Scopes) > 0 {
			fmt.Fprintf(&b, ", scopes %s", strings.Join(r.Scopes, ","))
		}
		if len(r.Tags) > 0 {
			fmt.Fprintf(&b, ", tags %s", strings.Join(r.Tags, ","))
		}
		b.WriteString("\n")
		if len(r.Items) == 0 {
			b.WriteString("    no item matched\n")
		}
		for i, it := range r.Items {
			fmt.Fprintf(&b, "    %s v%d score %.4g", it.ItemID, it.Version, it.Score)
			if wr := r.Written[i]; wr != nil {
				fmt.Fprintf(&b, ": written at %s seq %d", n.of(wr.Branch), wr.Seq)
				if p := wr.Provenance; p != nil {
					fmt.Fprintf(&b, ", provenance session %s: %s", n.of(p.Session), clip(p.Evidence, 120))
				}
			} else {
				b.WriteString(": written outside this session graph")
			}
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (a *app) auditModifiedCmd(src *auditSource) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "modified [SESSION] --file F",
		Short: "Which tool call modified file F, with its diff",
		Long: `modified lists every tool call in the session graph whose recorded diff
changes F (the path as the diff names it, or its trailing part: "calc.go"
matches "calc/calc.go"): branch, sequence, call ID, tool, agent, arguments,
exit code, commits, whether it is on the accepted path, and the part of the
diff that changes F.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return usageError{errors.New("--file F is required")}
			}
			d, _, err := a.open(cmd, src, args)
			if err != nil {
				return err
			}
			changes := d.ModifiedFile(file)
			if a.json {
				return a.printJSON(struct {
					File    string               `json:"file"`
					Changes []dossier.FileChange `json:"changes"`
				}{file, changes})
			}
			var b strings.Builder
			n := namesOf(d)
			if len(changes) == 0 {
				fmt.Fprintf(&b, "no tool call in the graph of %s changed %s\n", d.Root, file)
			}
			for _, c := range changes {
				accepted := ""
				if c.OnAcceptedPath {
					accepted = ", on the accepted path"
				}
				fmt.Fprintf(&b, "%s seq %d: tool call %s %s by %s%s\n", n.full(c.Branch), c.Seqs[len(c.Seqs)-1], c.CallID, c.Tool, orNone(c.Agent), accepted)
				fmt.Fprintf(&b, "  arguments: %s\n", clip(string(c.Arguments), 300))
				fmt.Fprintf(&b, "  status %s, exit %d, commits %s → %s, files %s\n", c.Status, c.ExitCode, orNone(short(c.CommitBefore)), orNone(short(c.CommitAfter)), strings.Join(c.Files, ", "))
				for line := range strings.Lines(c.FileDiff) {
					b.WriteString("  | " + line)
				}
				if !strings.HasSuffix(c.FileDiff, "\n") {
					b.WriteString("\n")
				}
			}
			_, err = io.WriteString(a.Stdout, b.String())
			return err
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "the file, as the diff names it or its trailing part")
	return cmd
}

func (a *app) auditRouteCmd(src *auditSource) *cobra.Command {
	var (
		step  uint64
		route string
	)
	cmd := &cobra.Command{
		Use:   "route [SESSION] (--step N [--route R] | --route R)",
		Short: "Why the selector took route R at step N",
		Long: `route explains a selector decision on the branch's logical log: with --step N,
the rath.selector.decided event at N, or, when N is another event, the last
decision before it (the one in force); with --route R too, that decision must
have taken R. With --route R alone: every decision that took R. For each: the
rule, the route, the reason, the inputs the rule read, the candidate rules
that held, the routed agent and turn, and the event that triggered it.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if step == 0 && route == "" {
				return usageError{errors.New("give --step N, --route R, or both")}
			}
			d, branch, err := a.open(cmd, src, args)
			if err != nil {
				return err
			}
			ans, err := d.Route(branch, step, route)
			if err != nil {
				return questionError(err)
			}
			if a.json {
				return a.printJSON(ans)
			}
			return writeRoute(a.Stdout, ans, namesOf(d))
		},
	}
	cmd.Flags().Uint64Var(&step, "step", 0, "sequence number of the branch's logical log")
	cmd.Flags().StringVar(&route, "route", "", "the route, as the decision records it (agent:coder, close:succeeded, fork:coder@7, …)")
	return cmd
}

func writeRoute(w io.Writer, ans dossier.RouteAnswer, n branchNames) error {
	var b strings.Builder
	switch {
	case ans.Other != nil:
		fmt.Fprintf(&b, "%s step %d: the selector took route %s (seq %d, rule %s), not %s\n", n.full(ans.Branch), ans.Step, ans.Other.Route, ans.Other.Seq, ans.Other.Rule, ans.Route)
	case len(ans.Decisions) == 0 && ans.Step > 0:
		fmt.Fprintf(&b, "%s step %d (%s): no selector decision at or before it\n", n.full(ans.Branch), ans.Step, ans.StepType)
	case len(ans.Decisions) == 0:
		fmt.Fprintf(&b, "%s: the selector never took route %s\n", n.full(ans.Branch), ans.Route)
	case ans.InForce:
		fmt.Fprintf(&b, "%s step %d is a %s; the decision in force was taken at seq %d\n", n.full(ans.Branch), ans.Step, ans.StepType, ans.Decisions[0].Seq)
	}
	for _, d := range ans.Decisions {
		branch := n.of(d.Branch)
		if b.Len() == 0 {
			branch = n.full(d.Branch) // the answer's first line
		}
		fmt.Fprintf(&b, "%s seq %d: route %s by rule %s\n", branch, d.Seq, d.Route, d.Rule)
		if d.Router != "" {
			fmt.Fprintf(&b, "  router:     %s chose the route\n", d.Router)
		}
		fmt.Fprintf(&b, "  reason:     %s\n", orNone(n.text(d.Reason)))
		if len(d.Inputs) > 0 {
			fmt.Fprintf(&b, "  inputs:     %s\n", clip(string(d.Inputs), 400))
		}
		if len(d.Candidates) > 0 {
			fmt.Fprintf(&b, "  candidates: %s\n", strings.Join(d.Candidates, ", "))
		}
		if d.Agent != "" || d.TurnID != "" {
			fmt.Fprintf(&b, "  routed:     agent %s, turn %s\n", orNone(d.Agent), orNone(d.TurnID))
		}
		if c := d.Cause; c != nil {
			if c.Seq > 0 {
				fmt.Fprintf(&b, "  trigger:    seq %d %s (event %s)\n", c.Seq, c.Type, c.EventID)
			} else {
				fmt.Fprintf(&b, "  trigger:    event %s\n", c.EventID)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (a *app) auditUsageCmd(src *auditSource) *cobra.Command {
	return &cobra.Command{
		Use:   "usage [SESSION]",
		Short: "Total token usage per agent on the accepted path",
		Long: `usage adds up the token usage of the accepted path: the logical log of the
branch that produced the final answer (its ancestry's events up to each fork
point, then its own), every model call once, by agent and by model, with each
segment's share. --branch B counts B's logical log instead. Usage that merges
took into the branch is not part of its logical log; it is shown apart.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, _, err := a.open(cmd, src, args)
			if err != nil {
				return err
			}
			p, err := d.PathUsage(src.branch)
			if err != nil {
				return questionError(err)
			}
			if a.json {
				return a.printJSON(p)
			}
			var b strings.Builder
			what := "accepted path"
			if src.branch != "" {
				what = "logical log"
			}
			n := namesOf(d)
			fmt.Fprintf(&b, "token usage on the %s of %s: in %d, out %d, %s\n", what, n.full(p.Branch), p.Usage.Total.In, p.Usage.Total.Out, plural(p.Usage.Total.Calls, "call", "calls"))
			writeUsageRows(&b, p.Usage.ByAgent, p.Usage.ByModel)
			for _, s := range p.Segments {
				to := fmt.Sprint(s.To)
				fmt.Fprintf(&b, "  segment %s %d..%s: in %d, out %d, %s\n", n.of(s.Session), s.From, to, s.Usage.Total.In, s.Usage.Total.Out, plural(s.Usage.Total.Calls, "call", "calls"))
			}
			if m := p.MergedIn.Total; m.Calls > 0 || m.In > 0 || m.Out > 0 {
				fmt.Fprintf(&b, "  taken in by merges (not counted above): in %d, out %d, %s\n", m.In, m.Out, plural(m.Calls, "call", "calls"))
			}
			_, err = io.WriteString(a.Stdout, b.String())
			return err
		},
	}
}

// writeUsageRows writes a line per agent, then per model, in columns as
// wide as their longest name and number, so a long model name does not
// push its row out of line.
func writeUsageRows(b *strings.Builder, byAgent, byModel map[string]session.Tokens) {
	type row struct {
		name           string
		in, out, calls string
	}
	var rows []row
	var w row // the widest of each column, in runes
	width := func(have *string, s string) {
		if utf8.RuneCountInString(s) > utf8.RuneCountInString(*have) {
			*have = s
		}
	}
	for _, by := range []struct {
		kind string
		m    map[string]session.Tokens
	}{{"agent", byAgent}, {"model", byModel}} {
		for _, k := range sortedTokenKeys(by.m) {
			t := by.m[k]
			r := row{by.kind + " " + k, strconv.FormatInt(t.In, 10), strconv.FormatInt(t.Out, 10), strconv.FormatInt(t.Calls, 10)}
			width(&w.name, r.name)
			width(&w.in, r.in)
			width(&w.out, r.out)
			width(&w.calls, r.calls)
			rows = append(rows, r)
		}
	}
	pad := func(s string, to string) string {
		return strings.Repeat(" ", utf8.RuneCountInString(to)-utf8.RuneCountInString(s))
	}
	for _, r := range rows {
		fmt.Fprintf(b, "  %s%s  in %s%s  out %s%s  calls %s%s\n", r.name, pad(r.name, w.name), pad(r.in, w.in), r.in, pad(r.out, w.out), r.out, pad(r.calls, w.calls), r.calls)
	}
}

func sortedTokenKeys(m map[string]session.Tokens) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
