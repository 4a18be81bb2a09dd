// Package answer builds the events a worker appends in answer to a stored
// event: one place decides their derived IDs, causation, correlation and
// source, so that every service links its answers the same way.
//
// The rule (docs/protocol.md, "The agent loop's events"):
//
//   - ID: derived from the handler, the answered event's ID and what the
//     answer records (events.DerivedID), so a redelivered event is answered
//     with the same IDs and its answers are stored once;
//   - causationid: the answered event's ID;
//   - correlationid: the answered event's, carried unchanged; an event
//     without one starts a unit of work, named by the turn ID for a
//     rath.agent.turn.requested and by the event's own ID otherwise.
package answer

import (
	"context"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Answer is one handler's answer to one stored event, its cause.
type Answer struct {
	cause   events.Stored
	handler string
	source  string
}

// To returns handler's answer to cause. handler is the handler's durable
// name, the first part of every derived ID: renaming it would give a
// redelivered event new IDs. source is the CloudEvents source of the
// answer's events; "" keeps the emitting client's.
func To(cause events.Stored, handler, source string) Answer {
	return Answer{cause: cause, handler: handler, source: source}
}

// Cause returns the answered event.
func (a Answer) Cause() events.Stored { return a.cause }

// ID returns the ID of the answer's event that records what: the same for
// every delivery of the cause.
func (a Answer) ID(what ...string) string {
	return events.DerivedID(append([]string{a.handler, a.cause.ID}, what...)...)
}

// Correlation returns the correlation ID of every event answering cause
// (see the package comment).
func Correlation(cause events.Stored) string {
	if cause.Correlation != "" {
		return cause.Correlation
	}
	if cause.Type == events.TypeTurnRequested {
		if d, err := cause.Decode(); err == nil {
			if req, ok := d.(*events.TurnRequested); ok && req.TurnID != "" {
				return req.TurnID
			}
		}
	}
	return cause.ID
}

// Links returns the options that tie an event to the cause: its source (if
// the answer has one), causation and correlation, without an ID. Use it
// for an answer whose ID is not derived from the cause (a placement is
// recorded once per workspace, whichever call made it); Options otherwise.
func (a Answer) Links() []events.Option {
	opts := make([]events.Option, 0, 3)
	if a.source != "" {
		opts = append(opts, events.WithSource(a.source))
	}
	return append(opts, events.WithCausation(a.cause.ID), events.WithCorrelation(Correlation(a.cause)))
}

// Options returns the options of the answer's event that records what: its
// derived ID and Links. Append more (events.WithExpectedSeq) as needed.
func (a Answer) Options(what ...string) []events.Option {
	return append(a.Links(), events.WithID(a.ID(what...)))
}

// Event builds the answer's event that records what, in the cause's
// session, for an append of several events at once. Without a source in
// the answer its source is events.New's default, not a client's.
func (a Answer) Event(data any, what ...string) (event.Event, error) {
	return events.New(a.cause.Session, data, a.Options(what...)...)
}

// Emit appends the answer's event that records what to the cause's session
// through c. The caller decides what a refusal means (api.ErrClosed: the
// session ended and takes no answer).
func (a Answer) Emit(ctx context.Context, c *client.Client, data any, what ...string) (api.Ack, error) {
	return c.Emit(ctx, a.cause.Session, data, a.Options(what...)...)
}
