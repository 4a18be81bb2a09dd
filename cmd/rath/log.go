package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

func (a *app) logCmd() *cobra.Command {
	var (
		from, to uint64
		limit    int
		keyFiles []string
	)
	cmd := &cobra.Command{
		Use:   "log SESSION",
		Short: "Print a page of a session's logical log (its fork ancestry included)",
		Long: `log prints the events of a session's logical log with FROM <= seq <= TO,
one line each: sequence, time, type and a summary of the data. A page holds
at most --limit events (0: the ledger's maximum, 1000). With --json each
line is the stored CloudEvent.

Each event is checked as it is printed: its hash recomputed, its link to the
event before it on the page, and the ledger's signature (with the keys of
--key, or else the ones the ledger names). An event that fails is marked
"!! NOT THE LEDGER'S" with the reason (written around the ledger: an
operator's forgery, a restored backup), and stderr says how many; the text is
printed as stored. rath verify checks the whole session, its head included.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ring, err := readKeys(keyFiles)
			if err != nil {
				return usageError{err}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			if ring == nil {
				if ring, err = c.Keyring(cmd.Context()); err != nil {
					return err
				}
			}
			r := client.Range{From: from, To: to, Limit: limit}
			if limit <= 0 {
				r.Limit = api.MaxLogPage
			}
			page, err := c.LogRaw(cmd.Context(), args[0], r)
			if err != nil {
				return err
			}
			check := logCheck{ring: ring}
			for _, raw := range page {
				ev, err := events.ParseStored(raw)
				if err != nil {
					return fmt.Errorf("log of %s: %w", args[0], err)
				}
				bad := check.event(raw, ev)
				if a.json {
					var b bytes.Buffer
					if err := json.Compact(&b, raw); err != nil {
						return fmt.Errorf("log of %s: %w", args[0], err)
					}
					b.WriteByte('\n')
					_, err = a.Stdout.Write(b.Bytes())
				} else {
					err = writeEvent(a.Stdout, ev)
					if err == nil && bad != "" {
						_, err = fmt.Fprintf(a.Stdout, "       !! NOT THE LEDGER'S: %s\n", bad)
					}
				}
				if err != nil {
					return err
				}
			}
			if check.bad > 0 {
				fmt.Fprintf(a.Stderr, "rath: %s of %s not as the ledger stored and signed %s (first: %d): run rath verify %s\n",
					plural(check.bad, "event", "events"), args[0], map[bool]string{true: "it", false: "them"}[check.bad == 1], check.first, args[0])
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.Uint64Var(&from, "from", 1, "first sequence")
	f.Uint64Var(&to, "to", 0, "last sequence (0: the head)")
	f.IntVar(&limit, "limit", 0, "at most this many events (0: the ledger's page size)")
	f.StringSliceVar(&keyFiles, "key", nil, "check signatures with these ledger public key files (PKIX PEM) instead of the keys the ledger names")
	return cmd
}

// logCheck checks the events of a page of a log, in order, as rath log
// prints them: what it finds is what an event written around the ledger
// shows (ADR 0012's chain, the ledger's signature).
type logCheck struct {
	ring  events.Keyring
	prev  *events.Stored // the event before on the page
	bad   int
	first uint64
}

// event returns why ev (stored as raw) is not the ledger's, or "".
func (c *logCheck) event(raw []byte, ev events.Stored) string {
	why := ""
	hash, err := events.ComputeHash(raw)
	switch {
	case err != nil:
		why = err.Error()
	case hash != ev.Hash:
		why = fmt.Sprintf("its content hashes to %s, not the %s it claims", shortHex(hash), shortHex(ev.Hash))
	case c.prev != nil && c.prev.Session == ev.Session && ev.Prev != c.prev.Hash:
		why = fmt.Sprintf("it does not follow event %d (its rathprev is %s, that event's hash %s)", c.prev.Seq, shortHex(ev.Prev), shortHex(c.prev.Hash))
	default:
		if err := c.ring.Verify(ev.Session, ev.Seq, ev.Hash, ev.Sig); err != nil {
			why = err.Error()
		}
	}
	c.prev = &ev
	if why != "" {
		if c.bad == 0 {
			c.first = ev.Seq
		}
		c.bad++
	}
	return why
}

func shortHex(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	if h == "" {
		return "(none)"
	}
	return h
}

func (a *app) watchCmd() *cobra.Command {
	var (
		from     uint64
		keyFiles []string
		noDeltas bool
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
not the ledger's event is skipped with a warning on stderr.

While a model's answer streams (the model gateway's streamed calls), watch
shows it as it grows, on a line starting with "~" that the stored events
then follow; these token deltas are live hints, never stored nor checked
(docs/protocol.md#token-deltas). --no-deltas leaves them out; with --json
they are not shown.`,
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
			opts := []client.WatchOption{warn, client.WithSignatures(ring), client.From(from)}
			growing := &growingAnswer{w: a.Stdout}
			if !a.json && !noDeltas {
				opts = append(opts, client.WithDeltas(growing.add))
			}
			err = c.Watch(ctx, args[0], func(ev events.Stored) error {
				if a.json {
					return a.printLine(ev)
				}
				growing.end()
				return writeEvent(a.Stdout, ev)
			}, opts...)
			if ctx.Err() != nil {
				return nil // interrupted: the normal way to stop watching
			}
			return err
		},
	}
	cmd.Flags().Uint64Var(&from, "from", 1, "first sequence")
	cmd.Flags().StringSliceVar(&keyFiles, "key", nil, "check signatures with these ledger public key files (PKIX PEM) instead of the keys the ledger names")
	cmd.Flags().BoolVar(&noDeltas, "no-deltas", false, "do not show answers as they stream (token deltas)")
	return cmd
}

// growingAnswer prints a streaming answer's token deltas on one line as
// they come: "    ~  agent: text [tool name {arguments}]"; the line ends
// with the answer's last delta, or when an event is printed.
type growingAnswer struct {
	w      io.Writer
	answer string // the answer on the open line; "": none
}

func (g *growingAnswer) add(d events.Delta) {
	if d.Answer != g.answer {
		g.end()
		fmt.Fprintf(g.w, "    ~  %s: ", cmp.Or(d.Agent, "model"))
		g.answer = d.Answer
	}
	fmt.Fprint(g.w, inline(d.Text, 4096))
	if t := d.Tool; t != nil {
		if t.Name != "" {
			fmt.Fprintf(g.w, " [tool %s ", inline(t.Name, 64))
		}
		fmt.Fprint(g.w, inline(t.Arguments, 4096))
	}
	if d.Done {
		g.end()
	}
}

// end ends the open line, if there is one.
func (g *growingAnswer) end() {
	if g.answer != "" {
		fmt.Fprintln(g.w)
		g.answer = ""
	}
}

// writeEvent prints one event as a line: sequence, time, type, summary.
func writeEvent(w io.Writer, ev events.Stored) error {
	_, err := fmt.Fprintf(w, "%5d  %s  %-32s  %s\n", ev.Seq, ev.Time.UTC().Format(time.RFC3339), ev.Type, events.Summary(ev))
	return err
}

// clip puts s on one line and cuts it to at most n characters.
func clip(s string, n int) string { return events.Clip(s, n) }

// plural is n with the noun's singular or plural form: "1 branch",
// "2 branches".
func plural[N int | int64 | uint64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprint(n) + " " + many
}

// inline is s as it may be printed within a line of a terminal: anyone of
// the tenant may publish a delta, so a line break or tab is a space, any
// other control character (an escape sequence's start) is dropped, and it
// is cut to at most n bytes of whole runes.
func inline(s string, n int) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n' || r == '\r' || r == '\t':
			r = ' '
		case unicode.IsControl(r) || r == utf8.RuneError:
			continue
		}
		if b.Len()+utf8.RuneLen(r) > n {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}
