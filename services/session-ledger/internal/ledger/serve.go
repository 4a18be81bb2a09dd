package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/schema"
	"github.com/openrath/rath/pkg/tracing"
)

const (
	// maxInflightRequests bounds the requests one ledger works on at once.
	maxInflightRequests = 256
	// maxRecordedProposal bounds the copy of a refused proposal kept in its
	// rejection record.
	maxRecordedProposal = 64 << 10
)

// Serve answers the ledger subjects and consumes the inbox until ctx ends,
// then drains: in-flight requests and inbox proposals finish, none is lost.
func (l *Ledger) Serve(ctx context.Context, nc *nats.Conn) error {
	l.maxPayload = nc.MaxPayload()
	// The inbox consumer starts first: once requests are answered, the whole
	// ledger is up.
	inbox, err := l.consumeInbox(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return err
	}
	var (
		wg   sync.WaitGroup
		sem  = make(chan struct{}, maxInflightRequests)
		subs []*nats.Subscription
	)
	handle := func(subject string, fn func(context.Context, *nats.Msg) (any, error)) error {
		sub, err := nc.QueueSubscribe(subject, events.LedgerQueue, func(m *nats.Msg) {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				res, err := fn(rctx, m)
				l.reply(m, res, err)
			}()
		})
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", subject, err)
		}
		subs = append(subs, sub)
		return nil
	}
	for subject, fn := range map[string]func(context.Context, *nats.Msg) (any, error){
		events.SubjectAppend:  l.handleAppend,
		events.SubjectBatch:   l.handleBatch,
		events.SubjectState:   l.handleState,
		events.SubjectLog:     l.handleLog,
		events.SubjectList:    l.handleList,
		events.SubjectLineage: l.handleLineage,
		events.SubjectFork:    l.handleFork,
		events.SubjectMerge:   l.handleMerge,
		events.SubjectVerify:  l.handleVerify,
		events.SubjectSchema:  l.handleSchema,
		events.SubjectKeys:    l.handleKeys,
		events.SubjectArchive: l.handleArchive,
	} {
		if err := handle(subject, fn); err != nil {
			inbox.stop()
			return err
		}
	}
	if err := nc.Flush(); err != nil {
		inbox.stop()
		return fmt.Errorf("ledger subscriptions: %w", err)
	}
	l.log.Info("ledger serving", "name", l.cfg.Name, "subjects", "rath.ledger.*", "inbox", events.StreamInbox)
	defer l.startRetention(ctx)()
	<-ctx.Done()
	// Drain: stop taking requests, answer the ones queued, then wait until
	// every handler has replied.
	closed := make([]<-chan nats.SubStatus, len(subs))
	for i, s := range subs {
		closed[i] = s.StatusChanged(nats.SubscriptionClosed)
		_ = s.Drain()
	}
	for _, c := range closed {
		select {
		case <-c:
		case <-time.After(30 * time.Second):
		}
	}
	inbox.stop()
	wg.Wait()
	return nil
}

func (l *Ledger) reply(m *nats.Msg, res any, err error) {
	if m.Reply == "" {
		return
	}
	out := nats.NewMsg(m.Reply)
	if err != nil {
		var le *api.Error
		if !errors.As(err, &le) {
			le = &api.Error{Code: api.CodeUnavailable, Message: err.Error()}
		}
		out.Header.Set(api.HeaderError, string(le.Code))
		out.Data, _ = json.Marshal(api.ErrorReply{Error: le})
	} else if raw, ok := res.([]byte); ok {
		out.Data = raw
	} else {
		out.Data, err = marshalReply(res)
		if err != nil {
			out.Header.Set(api.HeaderError, string(api.CodeUnavailable))
			out.Data, _ = json.Marshal(api.ErrorReply{Error: &api.Error{Code: api.CodeUnavailable, Message: err.Error()}})
		}
	}
	if limit := l.maxPayload - 4096; err == nil && limit > 0 && int64(len(out.Data)) > limit {
		// Above what NATS carries: tell the client rather than go silent.
		le := api.Errorf(api.CodeTooLarge, "the reply to %s would be %d bytes, above the server's message limit of %d: page the log (rath.ledger.log) instead", m.Subject, len(out.Data), l.maxPayload)
		out = nats.NewMsg(m.Reply)
		out.Header.Set(api.HeaderError, string(le.Code))
		out.Data, _ = json.Marshal(api.ErrorReply{Error: le})
	}
	if err := m.RespondMsg(out); err != nil {
		l.log.Warn("reply lost", "subject", m.Subject, "err", err)
	}
}

// marshalReply encodes a reply without escaping <, >, & and U+2028/2029:
// encoding/json would rewrite them inside the stored bodies a log page
// carries (json.RawMessage), and a client must get the bytes the chain hash
// covers.
func marshalReply(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func decodeRequest(m *nats.Msg, v any) error {
	if len(m.Data) == 0 {
		return api.Errorf(api.CodeMalformed, "%s: empty request body, want JSON", m.Subject)
	}
	if err := json.Unmarshal(m.Data, v); err != nil {
		return api.Errorf(api.CodeMalformed, "%s: request body: %v", m.Subject, err)
	}
	return nil
}

// propose decides one proposal and records a permanent refusal on the
// rejections stream before anyone hears of it.
//
// The producer's trace context (a traceparent header, or the event's
// traceparent extension) parents the ledger's span; an event without the
// extension gets the header's, so the stored event names its producer's trace.
func (l *Ledger) propose(ctx context.Context, m *nats.Msg, via, rejectKey string) (a api.Ack, err error) {
	ctx = tracing.Extract(ctx, m.Header)
	ev, perr := events.FromNATS(m.Header, m.Data)
	if perr == nil {
		if tp := events.Traceparent(ev); tp == "" {
			if tp = tracing.Traceparent(ctx); tp != "" {
				ev.SetExtension(events.ExtTraceparent, tp)
			}
		} else if !trace.SpanContextFromContext(ctx).IsValid() {
			ctx = tracing.FromTraceparent(ctx, tp)
		}
	}
	ctx, span := tracing.Tracer("session-ledger").Start(ctx, "rath.ledger.append", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("rath.via", via), attribute.String("rath.session", ev.Subject()), attribute.String("rath.type", ev.Type())))
	defer func() {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetAttributes(attribute.Int64("rath.seq", int64(a.Seq)))
		}
		span.End()
	}()
	if perr != nil {
		err = api.Errorf(api.CodeMalformed, "%v", perr)
		return api.Ack{}, l.recordRejection(ctx, m, via, event.Event{}, err, rejectKey)
	}
	if via == "inbox" {
		if err = checkInboxSubject(m.Subject, &ev); err != nil {
			return api.Ack{}, l.recordRejection(ctx, m, via, ev, err, rejectKey)
		}
	}
	a, err = l.Append(ctx, ev)
	if err != nil && api.Permanent(err) {
		return api.Ack{}, l.recordRejection(ctx, m, via, ev, err, rejectKey)
	}
	return a, err
}

// recordRejection stores the rejection and returns the refusal. If the
// rejection cannot be stored the refusal turns transient, so the proposal is
// retried (inbox) or the caller told to retry: a refusal is never silent.
func (l *Ledger) recordRejection(ctx context.Context, m *nats.Msg, via string, ev event.Event, refusal error, key string) error {
	le := &api.Error{Code: api.CodeOf(refusal), Message: refusal.Error()}
	errors.As(refusal, &le)
	r := eventstore.Rejection{
		Time: l.now(), Session: ev.Subject(), EventID: ev.ID(), Type: ev.Type(),
		Code: string(le.Code), Message: le.Message, Via: via, Ledger: l.cfg.Name,
	}
	// A proposal that is not UTF-8 is recorded as text, its bad bytes
	// replaced, so the record stays JSON any reader can decode.
	if len(m.Data) <= maxRecordedProposal && json.Valid(m.Data) && utf8.Valid(m.Data) {
		r.Proposal = json.RawMessage(m.Data)
	} else {
		r.ProposalText = truncate(string(m.Data), maxRecordedProposal)
	}
	if len(m.Header) > 0 {
		r.ProposalHeader = m.Header
	}
	l.log.Warn("proposal rejected", "via", via, "session", r.Session, "event", r.EventID, "type", r.Type, "code", r.Code, "reason", r.Message)
	if err := l.store.Reject(ctx, r, key); err != nil {
		l.log.Error("rejection not recorded", "event", r.EventID, "err", err)
		return &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf("%s (and recording the rejection failed: %v)", le.Message, err)}
	}
	return refusal
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func (l *Ledger) handleAppend(ctx context.Context, m *nats.Msg) (any, error) {
	return l.propose(ctx, m, "request", "")
}

func (l *Ledger) handleState(ctx context.Context, m *nats.Msg) (any, error) {
	var r api.StateRequest
	if err := decodeRequest(m, &r); err != nil {
		return nil, err
	}
	return l.State(ctx, r.Session, r.At)
}

func (l *Ledger) handleLog(ctx context.Context, m *nats.Msg) (any, error) {
	var r api.LogRequest
	if err := decodeRequest(m, &r); err != nil {
		return nil, err
	}
	evs, more, err := l.Log(ctx, r.Session, r.From, r.To, r.Limit)
	if err != nil {
		return nil, err
	}
	if evs == nil {
		evs = []json.RawMessage{}
	}
	return api.LogReply{Events: evs, More: more}, nil
}

func (l *Ledger) handleList(ctx context.Context, m *nats.Msg) (any, error) {
	var f api.ListRequest
	if len(m.Data) > 0 {
		if err := decodeRequest(m, &f); err != nil {
			return nil, err
		}
	}
	recs, err := l.List(ctx, f)
	if err != nil {
		return nil, err
	}
	if recs == nil {
		recs = []eventstore.Record{}
	}
	return api.ListReply{Sessions: recs}, nil
}

func (l *Ledger) handleLineage(ctx context.Context, m *nats.Msg) (any, error) {
	var r api.SessionRequest
	if err := decodeRequest(m, &r); err != nil {
		return nil, err
	}
	if err := events.ValidateSessionID(r.Session); err != nil {
		return nil, api.Errorf(api.CodeInvalidSession, "%v", err)
	}
	return l.Lineage(ctx, r.Session)
}

func (l *Ledger) handleFork(ctx context.Context, m *nats.Msg) (any, error) {
	var r api.ForkRequest
	if err := decodeRequest(m, &r); err != nil {
		return nil, err
	}
	return l.Fork(ctx, r)
}

func (l *Ledger) handleMerge(ctx context.Context, m *nats.Msg) (any, error) {
	var r api.MergeRequest
	if err := decodeRequest(m, &r); err != nil {
		return nil, err
	}
	return l.Merge(ctx, r)
}

func (l *Ledger) handleVerify(ctx context.Context, m *nats.Msg) (any, error) {
	var r api.SessionRequest
	if err := decodeRequest(m, &r); err != nil {
		return nil, err
	}
	return l.Verify(ctx, r.Session)
}

func (l *Ledger) handleSchema(_ context.Context, m *nats.Msg) (any, error) {
	var r api.SchemaRequest
	if len(m.Data) > 0 {
		if err := decodeRequest(m, &r); err != nil {
			return nil, err
		}
	}
	if r.Type == "" {
		return api.SchemaList{Types: schema.List()}, nil
	}
	raw, ok := schema.Raw(r.Type)
	if !ok {
		return nil, api.Errorf(api.CodeUnknownType, "unknown event type %q", r.Type)
	}
	return raw, nil
}

func (l *Ledger) handleKeys(context.Context, *nats.Msg) (any, error) { return l.Keys() }
