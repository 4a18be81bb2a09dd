package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/internal/dossier"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

func (a *app) auditApprovedCmd(src *auditSource) *cobra.Command {
	var step uint64
	cmd := &cobra.Command{
		Use:   "approved [SESSION] --step N",
		Short: "Who approved (or rejected) the tool call at step N",
		Long: `approved names who decided the approval of the tool call at step N of the
branch's logical log (its request, start, result or failure, or its
approval's request or decision): the authenticated identity the ledger stamped
on the grant or rejection, when, the reason or comment, and what followed (how
the call ended, the next agent turn). A decision an ancestor took before the
fork counts. A call no gate held says so; one still waiting says who is asked.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if step == 0 {
				return usageError{errors.New("give --step N")}
			}
			d, branch, err := a.open(cmd, src, args)
			if err != nil {
				return err
			}
			ans, err := d.Approved(branch, step)
			if errors.Is(err, dossier.ErrNoCall) {
				return api.Errorf(api.CodeNotFound, "%v", err)
			}
			if err != nil {
				return questionError(err)
			}
			if a.json {
				return a.printJSON(ans)
			}
			return writeApproved(a.Stdout, ans, namesOf(d))
		},
	}
	cmd.Flags().Uint64Var(&step, "step", 0, "sequence number of the branch's logical log")
	return cmd
}

func writeApproved(w io.Writer, ans dossier.ApprovalAnswer, n branchNames) error {
	var b strings.Builder
	what := "approval " + ans.ApprovalID
	if ans.CallID != "" {
		what = fmt.Sprintf("tool call %s (%s by %s: %s)", ans.CallID, orNone(ans.Tool), orNone(ans.Agent), clip(string(ans.Arguments), 200))
	}
	fmt.Fprintf(&b, "%s step %d (%s): %s\n", n.full(ans.Branch), ans.Step, ans.StepType, what)
	requested := "?"
	if ans.Requested != nil {
		requested = fmt.Sprint(ans.Requested.Seq)
	}
	switch iv := ans.Decision; {
	case ans.ApprovalID == "":
		b.WriteString("  not gated: no approval was asked for it\n")
	case iv == nil:
		fmt.Fprintf(&b, "  approval %s, requested at %s: not decided yet\n", ans.ApprovalID, requested)
	default:
		fmt.Fprintf(&b, "  %s by %s at %s seq %d (%s), approval %s requested at %s\n", iv.Kind, orNone(iv.Actor), n.of(iv.Branch), iv.Seq,
			stamp(iv.Time), ans.ApprovalID, requested)
		if iv.Action != "" {
			fmt.Fprintf(&b, "  asked:    %s to allow: %s\n", orNone(iv.Approver), iv.Action)
		}
		switch {
		case iv.Text != "" && iv.Kind == dossier.InterventionRejected:
			fmt.Fprintf(&b, "  reason:   %s\n", iv.Text)
		case iv.Text != "":
			fmt.Fprintf(&b, "  comment:  %s\n", iv.Text)
		}
		if c := iv.Call; c != nil && c.Status == "failed" && c.ExitCode == 0 {
			fmt.Fprintf(&b, "  then:     the call failed, without running, at %s seq %d\n", n.of(c.Branch), c.Seq)
		} else if c != nil {
			fmt.Fprintf(&b, "  then:     the call %s (exit %d) at %s seq %d\n", c.Status, c.ExitCode, n.of(c.Branch), c.Seq)
		}
		if t := iv.Next; t != nil {
			fmt.Fprintf(&b, "  then:     turn %d of %s at %s seq %d\n", t.Number, t.Agent, n.of(t.Branch), t.Seq)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
