package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/cloudevents/sdk-go/v2/event"
	jsoniter "github.com/json-iterator/go"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/openrath/rath/internal/tracing"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// AppendAtomic decides proposals to one session together and stores them
// all or none: each is checked as Append would check it, against the state
// the ones before it leave, and the whole is one JetStream atomic batch,
// conditional on the session's head. A model's answer (its text, the tool
// calls it asks for, the model call and the end of the turn) is stored this
// way, so a crash can never leave half of it in the log.
//
// A proposal may expect the head only on the first event. Proposing the same
// events again (same IDs) returns the original acks, marked duplicate; a
// batch of which only some events are stored is refused as duplicate_id.
func (l *Ledger) AppendAtomic(ctx context.Context, evs []event.Event) ([]api.Ack, error) {
	if len(evs) == 0 {
		return nil, api.Errorf(api.CodeMalformed, "an atomic append needs at least one event")
	}
	if len(evs) > eventstore.MaxAtomic {
		return nil, api.Errorf(api.CodeTooLarge, "%d events in one atomic append, at most %d", len(evs), eventstore.MaxAtomic)
	}
	var x expectation
	seen := make(map[string]bool, len(evs))
	for i := range evs {
		ev := &evs[i]
		if err := refuseOperation(ev.Type()); err != nil {
			return nil, atIndex(i, err)
		}
		if t := ev.Type(); t == events.TypeSessionStarted {
			return nil, atIndex(i, api.Errorf(api.CodeMalformed, "%s cannot be part of an atomic append: start the session first", t))
		}
		if err := l.check(ev); err != nil {
			return nil, atIndex(i, err)
		}
		if ev.Subject() != evs[0].Subject() {
			return nil, atIndex(i, api.Errorf(api.CodeMalformed, "an atomic append is for one session: %s, not %s", evs[0].Subject(), ev.Subject()))
		}
		if seen[ev.ID()] {
			return nil, atIndex(i, api.Errorf(api.CodeMalformed, "event ID %s appears twice in the atomic append", ev.ID()))
		}
		seen[ev.ID()] = true
		ex := takeExpectation(ev)
		if i == 0 {
			x = ex
		} else if ex.set {
			return nil, atIndex(i, api.Errorf(api.CodeMalformed, "only the first event of an atomic append may expect a head (%s)", events.ExtExpectedSeq))
		}
	}
	return l.commit(ctx, evs, x, commitOpts{atomic: true})
}

// atIndex names the proposal of an atomic append a refusal is about.
func atIndex(i int, err error) error {
	var e *api.Error
	if errors.As(err, &e) {
		return &api.Error{Code: e.Code, Message: fmt.Sprintf("event %d of the atomic append: %s", i, e.Message)}
	}
	return fmt.Errorf("event %d of the atomic append: %w", i, err)
}

// handleAtomic answers an atomic append: a JSON array of structured-mode
// CloudEvents of one session (api.ContentTypeBatch), stored all or none.
// The reply holds one ack per event; a refusal refuses the whole and is
// recorded once, naming the event it is about.
func (l *Ledger) handleAtomic(ctx context.Context, m *nats.Msg) (any, error) {
	ctx = tracing.Extract(ctx, m.Header)
	ctx, span := tracing.Tracer("session-ledger").Start(ctx, "rath.ledger.atomic", trace.WithSpanKind(trace.SpanKindConsumer))
	defer span.End()
	var items []jsoniter.RawMessage
	if err := jsoniter.ConfigFastest.Unmarshal(m.Data, &items); err != nil {
		refusal := api.Errorf(api.CodeMalformed, "%s: the body must be a JSON array of structured CloudEvents (%s): %v", m.Subject, api.ContentTypeBatch, err)
		return nil, l.recordRejection(ctx, m, "atomic", event.Event{}, refusal, "")
	}
	span.SetAttributes(attribute.Int("rath.batch", len(items)))
	tp := tracing.Traceparent(ctx)
	evs := make([]event.Event, 0, len(items))
	for i, raw := range items {
		ev, err := events.FromNATS(nil, raw)
		if err != nil {
			return nil, l.recordRejection(ctx, m, "atomic", event.Event{}, api.Errorf(api.CodeMalformed, "event %d of the atomic append: %v", i, err), "")
		}
		if tp != "" && events.Traceparent(ev) == "" {
			ev.SetExtension(events.ExtTraceparent, tp)
		}
		evs = append(evs, ev)
	}
	acks, err := l.AppendAtomic(ctx, evs)
	if err != nil {
		if api.Permanent(err) {
			var first event.Event
			if len(evs) > 0 {
				first = evs[0]
			}
			return nil, l.recordRejection(ctx, m, "atomic", first, err, "")
		}
		return nil, err
	}
	out := api.BatchReply{Results: make([]api.BatchResult, len(acks))}
	for i := range acks {
		out.Results[i].Ack = &acks[i]
	}
	return out, nil
}
