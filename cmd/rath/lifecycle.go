package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// lifecycleCmds are the commands that move a session through its
// lifecycle: pause, resume, close (events the ledger checks against the
// state machine) and archive (the ledger's archive operation).
func (a *app) lifecycleCmds() []*cobra.Command {
	event := func(use, short string, emit func(ctx context.Context, c *client.Client, id, reason, outcome string) (api.Ack, error), withOutcome bool) *cobra.Command {
		var reason, outcome string
		cmd := &cobra.Command{
			Use:   use + " SESSION",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := a.client()
				if err != nil {
					return err
				}
				ack, err := emit(cmd.Context(), c, args[0], reason, outcome)
				if err != nil {
					return err
				}
				return a.printAck(ack)
			},
		}
		cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the event)")
		if withOutcome {
			cmd.Flags().StringVar(&outcome, "outcome", "", "how the session ended (succeeded, failed, abandoned, …)")
		}
		return cmd
	}
	pause := event("pause", "Pause a session: it still takes events, but the selector routes it no new work",
		func(ctx context.Context, c *client.Client, id, reason, _ string) (api.Ack, error) {
			return c.Pause(ctx, id, reason)
		}, false)
	resume := event("resume", "Resume a paused session",
		func(ctx context.Context, c *client.Client, id, reason, _ string) (api.Ack, error) {
			return c.Resume(ctx, id, reason)
		}, false)
	closeCmd := event("close", "Close a session: afterwards it takes only its archive (fork it to continue)",
		func(ctx context.Context, c *client.Client, id, reason, outcome string) (api.Ack, error) {
			return c.Close(ctx, id, events.SessionClosed{Outcome: outcome, Reason: reason})
		}, true)
	return []*cobra.Command{pause, resume, closeCmd, a.archiveCmd()}
}

func (a *app) archiveCmd() *cobra.Command {
	var req api.ArchiveRequest
	cmd := &cobra.Command{
		Use:   "archive SESSION",
		Short: "Archive a closed session now: its events go to a verifiable bundle in rath-blobs",
		Long: `archive writes a closed session's own events, as stored and with their hashes,
to a bundle in the object store rath-blobs and appends rath.session.archived
naming it. With --purge it also removes those events from the hot stream
(recorded as rath.session.purged); reads of the session then come from the
bundle. A purge is refused while a fork that is not closed reads the session's
events through its lineage. Archiving again answers the same archive.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Session = args[0]
			c, err := a.client()
			if err != nil {
				return err
			}
			rep, err := c.Archive(cmd.Context(), req)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(rep)
			}
			fmt.Fprintf(a.Stdout, "%s archived at %d in %s\n", rep.Session, rep.Archived.Seq, rep.BundleRef)
			if rep.Purged != nil {
				fmt.Fprintf(a.Stdout, "%s purged from the hot stream at %d\n", rep.Session, rep.Purged.Seq)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&req.Reason, "reason", "", "why (recorded in the event)")
	cmd.Flags().BoolVar(&req.Purge, "purge", false, "also purge the archived events from the hot stream now")
	return cmd
}
