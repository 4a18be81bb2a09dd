package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/memoryapi"
)

// memoryCmd is the memory command group: the memory service's operations
// and its provenance questions.
func (a *app) memoryCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "memory",
		Short: "Write, recall, retract and audit memory items (the memory service)",
		Long: `memory talks to the memory service (rath.memory.*, run by "rath up" or
services/memory-svc). Items are versioned; every write, recall and
retraction is recorded in the session named by --session.

Scopes are <kind>:<name> with kind user, agent, project, workflow or
session (project:rath, agent:coder, session:<id>). Evidence is one of
tool_result, human_correction, failed_attempt, validation_signal.`,
	}
	cmd.AddCommand(a.memAddCmd(), a.memSearchCmd(), a.memShowCmd(), a.memHistoryCmd(),
		a.memRetractCmd(), a.memRestoreCmd(), a.memReadersCmd(), a.memJustifyCmd(), a.memPresentCmd())
	return cmd
}

func (a *app) memory() (*client.Memory, error) {
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	return c.Memory(), nil
}

func (a *app) memAddCmd() *cobra.Command {
	var req memoryapi.AddRequest
	cmd := &cobra.Command{
		Use:   "add CONTENT",
		Short: "Write a memory item (or, with --item, a new version of one) and print its ID and version",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Content = args[0]
			m, err := a.memory()
			if err != nil {
				return err
			}
			rep, err := m.Add(cmd.Context(), req)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(rep)
			}
			_, err = fmt.Fprintf(a.Stdout, "%s %d (session %s seq %d)\n", rep.Record.ItemID, rep.Record.Version, rep.Ack.Session, rep.Ack.Seq)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Session, "session", "", "the session that causes the write (required; it records it)")
	f.StringVar(&req.ItemID, "item", "", "write a new version of this item (default: a new item)")
	f.StringVar(&req.Scope, "scope", "", "scope <kind>:<name> (required)")
	f.StringSliceVar(&req.Tags, "tag", nil, "tag (repeatable, or comma-separated)")
	f.StringVar(&req.Evidence, "evidence", memoryapi.EvidenceHumanCorrection, "kind of evidence: "+strings.Join(memoryapi.Evidences, ", "))
	f.StringSliceVar(&req.EventIDs, "event", nil, "ID of an event of the session that justifies the write (repeatable)")
	return cmd
}

func (a *app) memSearchCmd() *cobra.Command {
	var (
		req    memoryapi.RecallRequest
		scopes []string
	)
	cmd := &cobra.Command{
		Use:   "search QUERY",
		Short: "Rank memory items for a query; with --session, recall for that session (recorded in it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Query, req.Scopes = args[0], scopes
			m, err := a.memory()
			if err != nil {
				return err
			}
			var rep memoryapi.RecallReply
			if req.Session != "" {
				rep, err = m.Recall(cmd.Context(), req)
			} else {
				rep, err = m.Search(cmd.Context(), memoryapi.SearchRequest{Query: req.Query, Filter: req.Filter, K: req.K})
			}
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(rep)
			}
			w := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SCORE\tITEM\tVERSION\tSCOPE\tCONTENT")
			for _, h := range rep.Hits {
				fmt.Fprintf(w, "%.3f\t%s\t%d\t%s\t%s\n", h.Score, h.ItemID, h.Version, h.Scope, oneLine(h.Content, 80))
			}
			if rep.Ack != nil {
				fmt.Fprintf(w, "recorded in %s at %d\n", rep.Ack.Session, rep.Ack.Seq)
			}
			return w.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Session, "session", "", "recall for this session and record it there (default: an unrecorded search)")
	f.StringSliceVar(&scopes, "scope", nil, "only items in one of these scopes (repeatable)")
	f.StringSliceVar(&req.Tags, "tag", nil, "only items with every one of these tags (repeatable)")
	f.IntVarP(&req.K, "k", "k", memoryapi.DefaultK, "how many items")
	f.StringVar(&req.Agent, "agent", "", "the agent that recalls (with --session)")
	f.StringVar(&req.TurnID, "turn", "", "the turn that uses the items (with --session)")
	return cmd
}

func (a *app) memShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show ITEM",
		Short: "Show the version of an item that recall serves",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.memory()
			if err != nil {
				return err
			}
			it, err := m.Show(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(it)
			}
			w := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "item\t%s\nversions\t%d\n", it.ItemID, it.Versions)
			if len(it.Retracted) > 0 {
				fmt.Fprintf(w, "retracted\t%v\n", it.Retracted)
			}
			if c := it.Current; c != nil {
				fmt.Fprintf(w, "current\t%d\nscope\t%s\ntags\t%s\n", c.Version, c.Scope, strings.Join(c.Tags, ", "))
				printProvenance(w, c)
				fmt.Fprintf(w, "content\t%s\n", c.Content)
			} else {
				fmt.Fprintln(w, "current\tnone: every version is retracted")
			}
			return w.Flush()
		},
	}
}

func printProvenance(w io.Writer, r *memoryapi.Record) {
	if p := r.Provenance; p != nil {
		fmt.Fprintf(w, "provenance\t%s in %s", p.Evidence, p.Session)
		if len(p.EventIDs) > 0 {
			fmt.Fprintf(w, " (events %s)", strings.Join(p.EventIDs, ", "))
		}
		fmt.Fprintln(w)
	}
}

func (a *app) memHistoryCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "history ITEM",
		Short: "List every version and retraction of an item, oldest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.memory()
			if err != nil {
				return err
			}
			h, err := m.History(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(h)
			}
			w := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "TIME\tOP\tVERSION\tSESSION\tDETAIL")
			for _, r := range h.Records {
				detail := oneLine(r.Content, 60)
				switch {
				case r.Op == memoryapi.OpRetract:
					detail = fmt.Sprintf("by %s: %s", r.By, r.Reason)
				case r.RestoredFrom > 0:
					detail = fmt.Sprintf("restored from %d: %s", r.RestoredFrom, detail)
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", r.Time.Format("2006-01-02 15:04:05"), r.Op, r.Version, r.Session, detail)
			}
			return w.Flush()
		},
	}
}

func (a *app) memRetractCmd() *cobra.Command {
	var req memoryapi.RetractRequest
	cmd := &cobra.Command{
		Use:   "retract ITEM",
		Short: "Withdraw an item (or --version) from recall, recorded in --session",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.ItemID = args[0]
			m, err := a.memory()
			if err != nil {
				return err
			}
			rep, err := m.Retract(cmd.Context(), req)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(rep)
			}
			_, err = fmt.Fprintf(a.Stdout, "%s retracted (session %s seq %d)\n", rep.Record.ItemID, rep.Ack.Session, rep.Ack.Seq)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Session, "session", "", "the session that records the retraction (required)")
	f.IntVar(&req.Version, "version", 0, "retract only this version (0: every version)")
	f.StringVar(&req.By, "by", "", "who retracts (required)")
	f.StringVar(&req.Reason, "reason", "", "why (required)")
	return cmd
}

func (a *app) memRestoreCmd() *cobra.Command {
	var req memoryapi.RestoreRequest
	cmd := &cobra.Command{
		Use:   "restore ITEM VERSION",
		Short: "Write a new version of an item with the content of an earlier one",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.ItemID = args[0]
			if _, err := fmt.Sscan(args[1], &req.Version); err != nil || req.Version < 1 {
				return usageError{fmt.Errorf("version %q: want a number from 1", args[1])}
			}
			m, err := a.memory()
			if err != nil {
				return err
			}
			rep, err := m.Restore(cmd.Context(), req)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(rep)
			}
			_, err = fmt.Fprintf(a.Stdout, "%s %d restored from %d (session %s seq %d)\n", rep.Record.ItemID, rep.Record.Version, rep.Record.RestoredFrom, rep.Ack.Session, rep.Ack.Seq)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Session, "session", "", "the session that causes the restore (required; it records it)")
	f.StringVar(&req.By, "by", "", "who restores")
	f.StringVar(&req.Reason, "reason", "", "why")
	f.StringVar(&req.Evidence, "evidence", memoryapi.EvidenceHumanCorrection, "kind of evidence: "+strings.Join(memoryapi.Evidences, ", "))
	f.StringSliceVar(&req.EventIDs, "event", nil, "ID of an event of the session that justifies the restore (repeatable)")
	return cmd
}

func (a *app) memReadersCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "readers ITEM",
		Short: "List the sessions that read an item: their own recalls, a fork ancestor's, or a merge's",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.memory()
			if err != nil {
				return err
			}
			rep, err := m.Readers(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(rep)
			}
			w := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SESSION\tVIA\tRECALL\tVERSION\tAGENT\tTURN\tQUERY")
			for _, r := range rep.Readers {
				fmt.Fprintf(w, "%s\t%s\t%s@%d\t%d\t%s\t%s\t%s\n", r.Session, r.Via, r.StoredIn, r.Seq, r.Version, r.Agent, r.TurnID, oneLine(r.Query, 50))
			}
			return w.Flush()
		},
	}
}

func (a *app) memJustifyCmd() *cobra.Command {
	var version int
	cmd := &cobra.Command{
		Use:   "justify ITEM",
		Short: "Show what justified each version of an item: session, evidence kind and the events themselves",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.memory()
			if err != nil {
				return err
			}
			rep, err := m.Justify(cmd.Context(), memoryapi.JustifyRequest{ItemID: args[0], Version: version})
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(rep)
			}
			for _, j := range rep.Versions {
				state := ""
				if j.Retracted {
					state = " (retracted)"
				}
				if j.RestoredFrom > 0 {
					state += fmt.Sprintf(" (restored from %d)", j.RestoredFrom)
				}
				fmt.Fprintf(a.Stdout, "version %d%s: %s in session %s, written by event %s\n", j.Version, state, j.Provenance.Evidence, j.Provenance.Session, j.WrittenIn.EventID)
				for _, raw := range j.Evidence {
					ev, err := events.ParseStored(raw)
					if err != nil {
						return err
					}
					fmt.Fprintf(a.Stdout, "  %s seq %d %s %s\n", ev.Session, ev.Seq, ev.Type, oneLine(string(ev.Data), 80))
				}
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&version, "version", 0, "only this version (0: every version)")
	return cmd
}

func (a *app) memPresentCmd() *cobra.Command {
	var at uint64
	cmd := &cobra.Command{
		Use:   "present SESSION",
		Short: "List the memory items present in a session at --at (default its head), and why",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.memory()
			if err != nil {
				return err
			}
			rep, err := m.Present(cmd.Context(), memoryapi.PresentRequest{Session: args[0], At: at})
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(rep)
			}
			w := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "ITEM\tVERSIONS\tBECAUSE (at %d)\n", rep.At)
			for _, p := range rep.Items {
				var why []string
				for _, c := range p.Because {
					s := fmt.Sprintf("%s@%d", c.Kind, c.Seq)
					if c.Evidence != "" {
						s += " (" + c.Evidence + ")"
					}
					why = append(why, s)
				}
				note := ""
				if p.RetractedNow {
					note = "  [retracted since]"
				}
				fmt.Fprintf(w, "%s\t%v\t%s%s\n", p.ItemID, p.Versions, strings.Join(why, ", "), note)
			}
			return w.Flush()
		},
	}
	cmd.Flags().Uint64Var(&at, "at", 0, "the sequence (0: the head)")
	return cmd
}

// oneLine shortens s to one line of at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
