package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/pkg/eventstore"
)

func (a *app) verifyCmd() *cobra.Command {
	var dossierDir string
	cmd := &cobra.Command{
		Use:   "verify SESSION | verify --dossier DIR",
		Short: "Recompute a session's hash chain through its fork ancestry",
		Long: `verify asks the ledger to recompute every hash of the session's logical log
from the stream. It prints "OK <session> head <seq> <hash>", or
"BROKEN <session> at <seq>: <reason>" and exits with code 5.

With --dossier DIR it checks an exported dossier offline instead, without
NATS (see "rath export" and docs/dossier.md).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if dossierDir != "" {
				return cobra.NoArgs(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if dossierDir != "" {
				return a.verifyDossier(dossierDir)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.Verify(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			switch {
			case a.json:
				err = a.printJSON(r)
			case r.OK:
				_, err = fmt.Fprintf(a.Stdout, "OK %s head %d %s\n", r.Session, r.Head, r.HeadHash)
			case r.Fault != nil:
				_, err = fmt.Fprintf(a.Stdout, "BROKEN %s at %d: %s\n", r.Session, r.Fault.Seq, r.Fault.Reason)
			}
			if err != nil {
				return err
			}
			if !r.OK {
				return &brokenError{session: r.Session, fault: r.Fault}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dossierDir, "dossier", "", "verify the exported dossier in DIR offline (no NATS) instead of a session")
	return cmd
}

func (a *app) rejectsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rejects [SESSION]",
		Short: "List the proposals the ledger refused (of one session, or all)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var id string
			if len(args) == 1 {
				id = args[0]
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			if !a.json {
				fmt.Fprintln(tw, "TIME\tSESSION\tEVENT\tTYPE\tCODE\tVIA\tMESSAGE")
			}
			err = c.Rejections(cmd.Context(), id, func(r eventstore.Rejection) error {
				if a.json {
					return a.printLine(r)
				}
				_, err := fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Time.UTC().Format(time.RFC3339),
					orNone(r.Session), orNone(r.EventID), orNone(r.Type), r.Code, r.Via, clip(r.Message, 120))
				return err
			})
			if ferr := tw.Flush(); err == nil {
				err = ferr
			}
			if err != nil {
				return fmt.Errorf("rejections: %w", err)
			}
			return nil
		},
	}
}
