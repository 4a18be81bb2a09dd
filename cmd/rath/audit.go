package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/pkg/eventstore"
)

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
