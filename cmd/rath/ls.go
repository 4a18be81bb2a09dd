package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	api "github.com/openrath/rath/pkg/ledgerapi"
)

func (a *app) lsCmd() *cobra.Command {
	var (
		f      api.ListRequest
		labelf []string
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List sessions, oldest first",
		Long: `ls lists the session index: ID, status, sequence, parent@fork point,
workflow and creation time. The index is written on lifecycle events
(start, fork, merge, pause, resume, close), so SEQ is the head as of the
last of those; "rath state" gives the current head.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if f.Labels, err = labels(labelf); err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			list, err := c.List(cmd.Context(), f)
			if err != nil {
				return err
			}
			if a.json {
				if list == nil {
					list = []api.Session{}
				}
				return a.printJSON(list)
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATUS\tSEQ\tPARENT\tWORKFLOW\tCREATED")
			for _, s := range list {
				parent := "-"
				if s.Parent != "" {
					parent = fmt.Sprintf("%s@%d", s.Parent, s.ForkSeq)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", s.ID, s.Status, s.Seq, parent, orNone(s.Workflow), stamp(s.Created))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&f.Status, "status", "", "only sessions with this status (active, paused, closed)")
	cmd.Flags().StringArrayVar(&labelf, "label", nil, "only sessions with label key=value (repeatable)")
	return cmd
}
