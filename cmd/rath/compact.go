package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
)

func (a *app) compactCmd() *cobra.Command {
	var keep int
	cmd := &cobra.Command{
		Use:   "compact SESSION",
		Short: "Compact a session's transcript: a summary replaces all but the last --keep-last chunks in the model's context",
		Long: `compact appends rath.transcript.compacted: in the context agents see from now
on, the chunks before the last --keep-last are replaced by one extractive
summary (a clipped line per chunk, plus the durable facts: tool calls, pending
work, validations). Nothing is deleted: the chunks stay in the log and in the
state, earlier states are unchanged and the chain still verifies.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if keep < 0 {
				return usageError{fmt.Errorf("--keep-last must not be negative, got %d", keep)}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			ack, plan, err := c.Compact(cmd.Context(), args[0], keep)
			if errors.Is(err, client.ErrNothingToCompact) {
				_, err = fmt.Fprintf(a.Stdout, "%v\n", err)
				return err
			}
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(map[string]any{"ack": ack, "compacted": plan})
			}
			_, err = fmt.Fprintf(a.Stdout, "%s %d: compacted %d..%d, context ~%d → ~%d tokens\n", ack.Session, ack.Seq, plan.FromSeq, plan.ToSeq, plan.TokensBefore, plan.TokensAfter)
			return err
		},
	}
	cmd.Flags().IntVar(&keep, "keep-last", workflow.DefaultKeepLast, "how many of the newest chunks stay verbatim")
	return cmd
}
