package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

func (a *app) logCmd() *cobra.Command {
	var (
		from, to uint64
		limit    int
	)
	cmd := &cobra.Command{
		Use:   "log SESSION",
		Short: "Print a page of a session's logical log (its fork ancestry included)",
		Long: `log prints the events of a session's logical log with FROM <= seq <= TO,
one line each: sequence, time, type and a summary of the data. A page holds
at most --limit events (0: the ledger's maximum, 1000). With --json each
line is the stored CloudEvent.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if a.json {
				page, err := c.LogRaw(cmd.Context(), args[0], from, to, limit)
				if err != nil {
					return err
				}
				for _, raw := range page {
					var b bytes.Buffer
					if err := json.Compact(&b, raw); err != nil {
						return fmt.Errorf("log of %s: %w", args[0], err)
					}
					b.WriteByte('\n')
					if _, err := a.Stdout.Write(b.Bytes()); err != nil {
						return err
					}
				}
				return nil
			}
			page, err := c.Log(cmd.Context(), args[0], from, to, limit)
			if err != nil {
				return err
			}
			for _, ev := range page {
				if err := writeEvent(a.Stdout, ev); err != nil {
					return err
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.Uint64Var(&from, "from", 1, "first sequence")
	f.Uint64Var(&to, "to", 0, "last sequence (0: the head)")
	f.IntVar(&limit, "limit", 0, "at most this many events (0: the ledger's page size)")
	return cmd
}

func (a *app) watchCmd() *cobra.Command {
	var (
		from     uint64
		keyFiles []string
	)
	cmd := &cobra.Command{
		Use:   "watch SESSION",
		Short: "Print a session's log from --from, then follow it live until interrupted",
		Long: `watch prints a session's logical log from --from on, one line per event as
in "rath log", then each new event as the ledger stores it, until Ctrl-C.
No event is skipped or repeated. With --json each line is the event as
events.Stored (the envelope attributes Rath uses and the data).

Live events are checked (the next sequence, the chain link, the hash, the
ledger's signature, with the keys of --key or else the ones the ledger names);
the ledger's log fills any gap and settles any doubt. A live message that is
not the ledger's event is skipped with a warning on stderr.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			ring, err := readKeys(keyFiles)
			if err != nil {
				return usageError{err}
			}
			if ring == nil {
				if ring, err = c.Keyring(ctx); err != nil {
					return err
				}
			}
			warn := client.WithWarnings(func(w client.Warning) {
				fmt.Fprintf(a.Stderr, "rath: %s\n", w)
			})
			err = c.Watch(ctx, args[0], from, func(ev events.Stored) error {
				if a.json {
					return a.printLine(ev)
				}
				return writeEvent(a.Stdout, ev)
			}, warn, client.WithSignatures(ring))
			if ctx.Err() != nil {
				return nil // interrupted: the normal way to stop watching
			}
			return err
		},
	}
	cmd.Flags().Uint64Var(&from, "from", 1, "first sequence")
	cmd.Flags().StringSliceVar(&keyFiles, "key", nil, "check signatures with these ledger public key files (PKIX PEM) instead of the keys the ledger names")
	return cmd
}

// writeEvent prints one event as a line: sequence, time, type, summary.
func writeEvent(w io.Writer, ev events.Stored) error {
	_, err := fmt.Fprintf(w, "%5d  %s  %-32s  %s\n", ev.Seq, ev.Time.UTC().Format(time.RFC3339), ev.Type, summary(ev))
	return err
}

// summary says in a few words what an event's data holds.
func summary(ev events.Stored) string {
	d, err := ev.Decode()
	if err != nil {
		return clip(string(ev.Data), 60)
	}
	var parts []string
	add := func(format string, args ...any) { parts = append(parts, fmt.Sprintf(format, args...)) }
	opt := func(label, v string) {
		if v != "" {
			add("%s=%s", label, clip(v, 60))
		}
	}
	switch d := d.(type) {
	case *events.SessionStarted:
		opt("workflow", d.Workflow)
		opt("task", d.Task)
		if len(d.Labels) > 0 {
			add("labels=%s", joinLabels(d.Labels))
		}
	case *events.SessionForked:
		add("from %s@%d", d.Parent, d.AtSeq)
		opt("reason", d.Reason)
	case *events.SessionMerged:
		add("took in %s@%d", d.Source, d.SourceHead.Seq)
		n := uint64(0)
		for _, s := range d.Segments {
			n += s.To - s.From + 1
		}
		add("(%s)", plural(n, "event", "events"))
		opt("reason", d.Reason)
	case *events.SessionPaused:
		opt("reason", d.Reason)
	case *events.SessionResumed:
		opt("reason", d.Reason)
	case *events.SessionClosed:
		opt("outcome", d.Outcome)
		opt("reason", d.Reason)
	case *events.ChunkAppended:
		who := d.Role
		if d.Agent != "" {
			who += "/" + d.Agent
		}
		add("%s: %s", who, clip(d.Content, 60))
	case *events.TranscriptCompacted:
		add("%d..%d tokens %d→%d", d.FromSeq, d.ToSeq, d.TokensBefore, d.TokensAfter)
	case *events.ModelCalled:
		add("%s %s/%s in=%d out=%d %dms", d.Agent, d.Provider, d.Model, d.TokensIn, d.TokensOut, d.LatencyMS)
		opt("stop", d.StopReason)
	case *events.UsageRecorded:
		add("%s %s/%s in=%d out=%d", d.Agent, d.Provider, d.Model, d.TokensIn, d.TokensOut)
	case *events.ToolRequested:
		add("%s %s", d.Tool, d.CallID)
		opt("agent", d.Agent)
		if len(d.Arguments) > 0 {
			add("%s", clip(string(d.Arguments), 60))
		}
	case *events.ToolStarted:
		add("%s %s attempt %d", d.Tool, d.CallID, d.Attempt)
		if d.Sandbox != nil {
			add("in %s/%s", d.Sandbox.Backend, d.Sandbox.SandboxID)
		}
	case *events.ToolCompleted:
		add("%s %s exit %d %dms", d.Tool, d.CallID, d.ExitCode, d.DurationMS)
		opt("result", d.Result)
	case *events.ToolFailed:
		add("%s %s", d.Tool, d.CallID)
		opt("error", d.Error)
	case *events.SandboxPlaced:
		add("%s/%s", d.Backend, d.SandboxID)
		if events.Development(d.Backend) {
			add("(development backend: no isolation)")
		} else {
			opt("isolation", d.IsolationOf())
		}
		if d.From != nil {
			add("from %s/%s", d.From.Backend, d.From.SandboxID)
		}
		opt("host", d.Host)
		opt("reason", d.Reason)
	case *events.SandboxRequested:
		add("to %s", d.Backend)
		opt("reason", d.Reason)
	case *events.SandboxRefused:
		add("to %s refused: %s", d.Backend, clip(d.Reason, 60))
	case *events.MemoryRecalled:
		add("%s", plural(len(d.Items), "item", "items"))
		opt("query", d.Query)
	case *events.MemoryWritten:
		add("%s v%d scope=%s: %s", d.ItemID, d.Version, d.Scope, clip(d.Content, 60))
	case *events.MemoryRetracted:
		add("%s by %s", d.ItemID, d.By)
		opt("reason", d.Reason)
	case *events.SelectorDecided:
		add("%s → %s", d.Rule, d.Route)
		opt("reason", d.Reason)
	case *events.WorkPending:
		add("%s %s", d.WorkID, d.Kind)
		opt("assignee", d.Assignee)
		opt("description", d.Description)
	case *events.WorkDone:
		add("%s", d.WorkID)
		opt("outcome", d.Outcome)
	case *events.ValidationPassed:
		add("%s", d.Validator)
		opt("target", d.Target)
	case *events.ValidationFailed:
		add("%s", d.Validator)
		opt("target", d.Target)
		opt("reason", d.Reason)
	case *events.ApprovalRequested:
		add("%s %s", d.ApprovalID, clip(d.Action, 60))
		opt("approver", d.Approver)
	case *events.ApprovalGranted:
		add("%s by %s", d.ApprovalID, d.By)
		opt("comment", d.Comment)
	case *events.ApprovalRejected:
		add("%s by %s", d.ApprovalID, d.By)
		opt("reason", d.Reason)
	case *events.TurnRequested:
		add("%s %s", d.Agent, d.TurnID)
		opt("rule", d.Rule)
	case *events.TurnCompleted:
		add("%s %s tool_calls=%d", d.Agent, d.TurnID, d.ToolCalls)
		opt("stop", d.StopReason)
	case *events.TurnFailed:
		add("%s %s attempts=%d: %s", d.Agent, d.TurnID, d.Attempts, clip(d.Error, 60))
	case *events.ModelCallFailed:
		add("%s %s/%s attempt %d status %d: %s", d.Agent, d.Provider, d.Model, d.Attempt, d.Status, clip(d.Error, 60))
	case *events.HandlerFailed:
		add("%s gave up on %s (%s) after %s: %s", d.Handler, d.EventID, d.EventType, plural(d.Attempts, "attempt", "attempts"), clip(d.Error, 60))
	default:
		return clip(string(ev.Data), 60)
	}
	return strings.Join(parts, " ")
}

// clip puts s on one line and cuts it to at most n characters.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// plural is n with the noun's singular or plural form: "1 branch",
// "2 branches".
func plural[N int | int64 | uint64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprint(n) + " " + many
}
