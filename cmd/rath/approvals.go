package main

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// approvalCmds are the commands of the humans in the loop: list the
// approvals sessions wait for, grant one, reject one. A decision is an
// append (rath.approval.granted, rath.approval.rejected) whose decider is
// the identity rath connects as, which the ledger stamps on the event.
func (a *app) approvalCmds() []*cobra.Command {
	list := &cobra.Command{
		Use:   "approvals [SESSION]",
		Short: "List the approvals sessions wait for (of one session, or of every open one)",
		Long: `approvals lists the pending approvals of a session, or of every session that is
not closed: the session, the approval ID, the action, the gated call's tool
and arguments, when it was requested, the approver role asked, and the
deadline with what follows it undecided (reject, close, escalate). Grant
one with rath approve, reject one with rath reject.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ids := args
			if len(ids) == 0 {
				all, err := c.List(cmd.Context(), api.ListRequest{})
				if err != nil {
					return fmt.Errorf("approvals: %w", err)
				}
				for _, s := range all {
					if st := session.Status(s.Status); !st.Ended() {
						ids = append(ids, s.ID)
					}
				}
			}
			pending, err := c.PendingIn(cmd.Context(), ids)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(pending)
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SESSION\tAPPROVAL\tACTION\tARGUMENTS\tREQUESTED\tAPPROVER\tDEADLINE")
			for _, p := range pending {
				args := string(p.Arguments)
				if p.ArgumentsSize > 0 {
					args = fmt.Sprintf("(%d bytes: rath log %s --json)", p.ArgumentsSize, p.Session)
				}
				action := p.Action
				if p.Tool != "" {
					action += " (" + p.Tool + ")"
				}
				approver := orNone(p.Approver)
				if p.EscalatedFrom != "" {
					approver += " (escalated from " + p.EscalatedFrom + ")"
				}
				deadline := orNone(p.Deadline)
				if p.Deadline != "" {
					deadline += " then " + p.OnTimeout
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Session, p.ApprovalID, action, orNone(events.Clip(args, 80)),
					p.Requested.UTC().Format(time.RFC3339), approver, deadline)
			}
			return tw.Flush()
		},
	}

	var comment string
	approve := &cobra.Command{
		Use:   "approve SESSION APPROVAL",
		Short: "Grant a pending approval: a gated tool call runs",
		Long: `approve appends rath.approval.granted for a pending approval of the session. The
approver recorded is the identity rath connects as (--creds), not a name
given here. An approval the session never requested, one decided already,
or one whose deadline has passed is refused (exit 9); a decision by an
identity that does not hold the approver role asked is refused (exit 8).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ack, err := c.Approve(cmd.Context(), args[0], args[1], comment)
			if err != nil {
				return err
			}
			return a.printAck(ack)
		},
	}
	approve.Flags().StringVar(&comment, "reason", "", "why (recorded in the event as its comment)")

	var reason string
	reject := &cobra.Command{
		Use:   "reject SESSION APPROVAL --reason TEXT",
		Short: "Reject a pending approval: a gated tool call fails with the reason",
		Long: `reject appends rath.approval.rejected for a pending approval of the session. A
gated tool call fails with the reason, which its agent reads as the call's
result. The rejecter recorded is the identity rath connects as. An approval
the session never requested, one decided already, or one whose deadline has
passed is refused (exit 9); a rejection by an identity that does not hold
the approver role asked is refused (exit 8).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if reason == "" {
				return usageError{errors.New("reject needs --reason: the agent reads it as the call's result")}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			ack, err := c.Reject(cmd.Context(), args[0], args[1], reason)
			if err != nil {
				return err
			}
			return a.printAck(ack)
		},
	}
	reject.Flags().StringVar(&reason, "reason", "", "why (required; the gated call fails with it)")
	return []*cobra.Command{list, approve, reject}
}
