// Package evidence records what one attempt of a tool call did, in the
// call's session: its start, its result or its failure, with the result
// kept in the event up to InlineLimit and the whole of a longer one in the
// blob store. The tool runner and every custom tool server
// (pkg/toolserver) record through it, so their evidence is the same.
//
// Every event answers the stored event that ran the call (its request, or
// the decision of the approval that gated it) through internal/answer,
// with an ID derived from the handler, that event, what the event records
// and the attempt: a redelivered attempt records each event once, and a new
// attempt records its own.
//
// It links pkg/client, pkg/events, pkg/eventstore and internal/answer
// only: pkg/toolserver is a light contract (ADR 0024) and must not pull
// CEL, YAML or the workflow engine in through it.
package evidence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/openrath/rath/internal/answer"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// InlineLimit bounds, in bytes, a text (a result, a diff) kept inside an
// event; a longer one goes to the blob store by hash and the event keeps a
// prefix of at most InlineLimit bytes and a note naming the blob.
const InlineLimit = 16 << 10

// noReason is what a failure records for an error without a message.
const noReason = "the call failed without saying why"

// Recorder records the evidence of one handler's tool calls.
type Recorder struct {
	c       *client.Client
	blobs   *eventstore.Store
	handler string
	source  string
}

// New returns a recorder appending through c and keeping long texts in
// blobs. handler is the handler's durable name, the first part of every
// derived ID (renaming it would record a redelivered call again); source is
// the CloudEvents source of its events, "" for c's own.
func New(c *client.Client, blobs *eventstore.Store, handler, source string) *Recorder {
	return &Recorder{c: c, blobs: blobs, handler: handler, source: source}
}

// Attempt returns the evidence of attempt n of the call req, run in answer
// to ev.
func (r *Recorder) Attempt(ev events.Stored, req *events.ToolRequested, n int) Attempt {
	return Attempt{r: r, ev: ev, req: req, n: n}
}

// Inline returns text as an event keeps it: text itself when it is valid
// UTF-8 of at most InlineLimit bytes; otherwise the blob reference of its
// exact bytes, and a prefix of at most InlineLimit bytes of valid UTF-8
// (see prefix) followed by a note of its size and reference. A text that
// is not valid UTF-8 is kept whole in the blob whatever its size, since an
// event can hold only valid UTF-8 (a diff of a Latin-1 file keeps its
// bytes).
func (r *Recorder) Inline(ctx context.Context, text string) (inline, ref string, err error) {
	return Keep(ctx, r.blobs, text)
}

// Blobs stores bytes by content and returns their reference:
// *eventstore.Store and *client.Client are both.
type Blobs interface {
	PutBlob(ctx context.Context, data []byte) (string, error)
}

// Keep is Inline through any blob store, for a program that records a
// call's evidence without a Recorder (the MCP proxy).
func Keep(ctx context.Context, blobs Blobs, text string) (inline, ref string, err error) {
	if len(text) <= InlineLimit && utf8.ValidString(text) {
		return text, "", nil
	}
	ref, err = blobs.PutBlob(ctx, []byte(text))
	if err != nil {
		return "", "", fmt.Errorf("store a %d-byte text: %w", len(text), err)
	}
	return Prefix(text, InlineLimit) + fmt.Sprintf("\n… [%d bytes in all: %s]", len(text), ref), ref, nil
}

// Prefix returns the first n bytes of text, at most, as valid UTF-8: a rune
// the cut splits is left out rather than stored half (or replaced), and an
// invalid sequence before the cut becomes U+FFFD, cut again if the
// replacements made it longer than n.
func Prefix(text string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(text) > n {
		text = text[:n]
		for i := len(text) - 1; i >= 0 && i >= len(text)-utf8.UTFMax; i-- {
			if utf8.RuneStart(text[i]) {
				if !utf8.FullRuneInString(text[i:]) {
					text = text[:i] // the beginning of a rune the cut split
				}
				break
			}
		}
	}
	text = strings.ToValidUTF8(text, "\uFFFD")
	if len(text) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut]
	}
	return text
}

// Attempt is the evidence of one attempt of one tool call.
type Attempt struct {
	r   *Recorder
	ev  events.Stored
	req *events.ToolRequested
	n   int
}

// Event is one more event a completed call records, and what it records
// (the last part of its derived ID).
type Event struct {
	What string
	Data any
}

// Emit appends data, the attempt's event that records what. A session
// that has closed takes no answer: that is not an error.
func (a Attempt) Emit(ctx context.Context, what string, data any) error {
	_, err := answer.To(a.ev, a.r.handler, a.r.source).Emit(ctx, a.r.c, data, what, strconv.Itoa(a.n))
	if errors.Is(err, api.ErrClosed) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("call %s: record %s: %w", a.req.CallID, what, err)
	}
	return nil
}

// Start records that the attempt started, in sb (nil for a call that runs
// outside a sandbox).
func (a Attempt) Start(ctx context.Context, sb *events.Sandbox) error {
	return a.Emit(ctx, "started", &events.ToolStarted{CallID: a.req.CallID, Tool: a.req.Tool, Attempt: a.n, Sandbox: sb})
}

// Complete records the attempt's success. done is the completion, whose
// call, tool and attempt it sets, and whose result and diff it sets from
// result and diff as Inline keeps them; result is text for the model, so
// its invalid UTF-8 becomes U+FFFD (in the blob too), while a diff keeps
// its bytes. The result reaches the model first, as a tool chunk; then
// come then's events (a verdict, an experiment), then the completion, which
// lets the selector route the next turn.
func (a Attempt) Complete(ctx context.Context, done *events.ToolCompleted, result, diff string, then ...Event) error {
	done.CallID, done.Tool, done.Attempt = a.req.CallID, a.req.Tool, a.n
	var err error
	if done.Result, done.ResultRef, err = a.r.Inline(ctx, strings.ToValidUTF8(result, "\uFFFD")); err != nil {
		return fmt.Errorf("call %s: result: %w", a.req.CallID, err)
	}
	if done.Diff, done.DiffRef, err = a.r.Inline(ctx, diff); err != nil {
		return fmt.Errorf("call %s: diff: %w", a.req.CallID, err)
	}
	if err := a.Emit(ctx, "chunk", &events.ChunkAppended{Role: events.RoleTool, Agent: a.req.Agent, Content: done.Result, ToolCallID: a.req.CallID}); err != nil {
		return err
	}
	for _, e := range then {
		if err := a.Emit(ctx, e.What, e.Data); err != nil {
			return err
		}
	}
	return a.Emit(ctx, "completed", done)
}

// Fail records the attempt's failure: the model reads why as the tool's
// result, and the failure, after dur in sb (nil: none), ends the call. why
// is kept as valid UTF-8 of at most InlineLimit bytes and a note of its
// size (an error is not evidence worth a blob), and an empty why is said
// so (the failure's schema requires one): no error a tool returns can make
// the failure unrecordable.
func (a Attempt) Fail(ctx context.Context, why string, dur time.Duration, sb *events.Sandbox) error {
	why = Reason(why)
	if err := a.Emit(ctx, "chunk", &events.ChunkAppended{Role: events.RoleTool, Agent: a.req.Agent, Content: "error: " + why, ToolCallID: a.req.CallID}); err != nil {
		return err
	}
	return a.Emit(ctx, "failed", &events.ToolFailed{CallID: a.req.CallID, Tool: a.req.Tool, Attempt: a.n, Error: why,
		DurationMS: dur.Milliseconds(), Sandbox: sb})
}

// Reason returns why a call failed as its rath.tool.call.failed keeps it:
// valid UTF-8 of at most InlineLimit bytes and a note of its size (an
// error is not evidence worth a blob), and an empty why said so (the
// failure's schema requires one).
func Reason(why string) string {
	switch {
	case why == "":
		return noReason
	case len(why) > InlineLimit:
		return Prefix(why, InlineLimit) + fmt.Sprintf("\n… [%d bytes in all]", len(why))
	}
	return strings.ToValidUTF8(why, "\uFFFD")
}
