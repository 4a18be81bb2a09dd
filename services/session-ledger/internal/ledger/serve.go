package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/openrath/rath/internal/reqrep"
	"github.com/openrath/rath/internal/telemetry"
	"github.com/openrath/rath/internal/tracing"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/schema"
	"github.com/openrath/rath/pkg/session"
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
	// The catalog lists sessions from memory; without it List reads the
	// index (slow with many sessions, never wrong).
	if cat, err := l.store.WatchCatalog(ctx); err != nil {
		l.log.Warn("listing sessions from the index: no catalog", "err", err)
	} else {
		l.catalog.Store(cat)
		defer cat.Stop()
		l.log.Info("session catalog loaded", "sessions", cat.Len())
	}
	srv, err := reqrep.Start(ctx, nc, reqrep.Config{
		Prefix: events.LedgerPrefix, Queue: events.LedgerQueue, Service: "ledger", Inflight: maxInflightRequests, Timeout: 30 * time.Second,
		TooLarge: "ask for less (a smaller tail or clip of the state overview) or page the log (the ledger's log operation)",
		Log:      l.log,
	}, map[string]reqrep.Handler{
		events.OpAppend:     l.handleAppend,
		events.OpBatch:      l.handleBatch,
		events.OpAtomic:     l.handleAtomic,
		events.OpState:      l.handleState,
		events.OpLog:        l.handleLog,
		events.OpList:       l.handleList,
		events.OpLineage:    l.handleLineage,
		events.OpFork:       l.handleFork,
		events.OpMerge:      l.handleMerge,
		events.OpVerify:     l.handleVerify,
		events.OpSchema:     l.handleSchema,
		events.OpKeys:       l.handleKeys,
		events.OpArchive:    l.handleArchive,
		events.OpRejections: l.handleRejections,
		events.OpPutBlob:    l.handlePutBlob,
		events.OpGetBlob:    l.handleGetBlob,
		events.OpPull:       l.handlePull,
		events.OpSettle:     l.handleSettle,
		events.OpTools:      l.handleTools,
	})
	if err != nil {
		inbox.stop()
		return fmt.Errorf("ledger: %w", err)
	}
	l.log.Info("ledger serving", "name", l.cfg.Name, "subjects", events.LedgerPrefix+"<tenant>.<user>.<op>", "inbox", events.StreamInbox)
	close(l.ready)
	defer l.startRetention(ctx)()
	heads := make(chan struct{})
	go func() { l.heads.run(ctx); close(heads) }()
	<-ctx.Done()
	// Drain: stop taking requests, answer the ones queued, then wait until
	// every handler has replied; then the inbox.
	srv.Stop()
	inbox.stop()
	<-heads
	fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.FlushHeads(fctx); err != nil {
		l.log.Warn("heads not all recorded at shutdown", "err", err)
	}
	return nil
}

// Ready is closed once Serve has subscribed to every operation and the
// server has them all: a request of any operation, from any connection, is
// answered from then on. One operation answering says nothing of the
// others, which Serve subscribes to in no set order.
func (l *Ledger) Ready() <-chan struct{} { return l.ready }

func decodeRequest(m *nats.Msg, v any) error { return reqrep.Decode(m, v) }

// propose decides one proposal and records a permanent refusal on the
// rejections stream before anyone hears of it.
//
// The producer's trace context (a traceparent header, or the event's
// traceparent extension) parents the ledger's span; an event without the
// extension gets the header's, so the stored event names its producer's trace.
func (l *Ledger) propose(ctx context.Context, m *nats.Msg, via, rejectKey string) (a api.Ack, err error) {
	ctx = tracing.Extract(ctx, m.Header)
	if via == "inbox" {
		// Who proposed is named by the inbox subject, as by a request's.
		if p, _, _ := events.ParseInbox(m.Subject); p.Validate() == nil {
			ctx = withPrincipal(ctx, p)
		}
	}
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
		if rejectKey == "" && ev.ID() != "" {
			// A client asks again when an answer is late (its node lost,
			// a busy ledger): its proposal, refused again, is recorded once.
			rejectKey = requestKey(principalOf(ctx).Tenant, ev.ID())
		}
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
	telemetry.Refused(string(le.Code))
	p := principalOf(ctx)
	r := eventstore.Rejection{
		Time: l.now(), Session: ev.Subject(), EventID: ev.ID(), Type: ev.Type(), Actor: p.String(), Tenant: p.Tenant,
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

// requestKey is the rejection record key of a proposal by request: one
// record per event ID of a tenant within the dedupe window.
func requestKey(tenant, eventID string) string {
	return "request-" + eventstore.MsgID(tenant, eventID)
}

func (l *Ledger) handleAppend(ctx context.Context, m *nats.Msg) (any, error) {
	return l.propose(ctx, m, "request", "")
}

func (l *Ledger) handleState(ctx context.Context, m *nats.Msg) (any, error) {
	var r api.StateRequest
	if err := decodeRequest(m, &r); err != nil {
		return nil, err
	}
	if err := l.readable(ctx, r.Session); err != nil {
		return nil, err
	}
	switch {
	case r.Whole && (r.Tail != 0 || r.Clip != 0 || len(r.ToolCalls) > 0):
		return nil, api.Errorf(api.CodeMalformed, "a whole state takes no tail, clip or tool_calls")
	case r.Whole:
		return l.WholeState(ctx, r.Session, r.At, r.Part)
	case r.Part != 0:
		return nil, api.Errorf(api.CodeMalformed, "part %d: parts are of a whole state (whole: true)", r.Part)
	}
	return l.Overview(ctx, r.Session, r.At, session.OverviewOptions{Tail: r.Tail, Clip: r.Clip, Calls: r.ToolCalls})
}

func (l *Ledger) handleLog(ctx context.Context, m *nats.Msg) (any, error) {
	var r api.LogRequest
	if err := decodeRequest(m, &r); err != nil {
		return nil, err
	}
	if err := l.readable(ctx, r.Session); err != nil {
		return nil, err
	}
	evs, more, err := l.Log(ctx, r.Session, r.From, r.To, r.Limit)
	if err != nil {
		return nil, err
	}
	return encodeLog(evs, more), nil
}

// encodeLog is api.LogReply{Events: evs, More: more} as JSON, written
// directly: the events are stored bodies, JSON the ledger wrote itself, and
// json.Marshal's check and compaction of each was a third of the CPU of
// reading a log back (issue 32, O6r).
func encodeLog(evs []json.RawMessage, more bool) []byte {
	n := len(`{"events":[],"more":true}`) + len(evs)
	for _, ev := range evs {
		n += len(ev)
	}
	b := make([]byte, 0, n)
	b = append(b, `{"events":[`...)
	for i, ev := range evs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, ev...)
	}
	b = append(b, ']')
	if more {
		b = append(b, `,"more":true`...)
	}
	return append(b, '}')
}

func (l *Ledger) handleList(ctx context.Context, m *nats.Msg) (any, error) {
	var f api.ListRequest
	if len(m.Data) > 0 {
		if err := decodeRequest(m, &f); err != nil {
			return nil, err
		}
	}
	return l.List(ctx, f)
}

func (l *Ledger) handleLineage(ctx context.Context, m *nats.Msg) (any, error) {
	var r api.SessionRequest
	if err := decodeRequest(m, &r); err != nil {
		return nil, err
	}
	if err := events.ValidateSessionID(r.Session); err != nil {
		return nil, api.Errorf(api.CodeInvalidSession, "%v", err)
	}
	if err := l.readable(ctx, r.Session); err != nil {
		return nil, err
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
	if err := l.readable(ctx, r.Session); err != nil {
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

// handleTools lists the tool registry: names, descriptions and servers,
// the same for every tenant (tools are the deployment's).
func (l *Ledger) handleTools(ctx context.Context, _ *nats.Msg) (any, error) {
	specs, err := l.store.Tools(ctx)
	if err != nil {
		return nil, unavailable(err)
	}
	out := api.Tools{Tools: make([]api.Tool, 0, len(specs))}
	for _, s := range specs {
		out.Tools = append(out.Tools, api.Tool{Name: s.Name, Description: s.Description, Server: s.Server})
	}
	return out, nil
}

// maxRejectionsPage bounds one page of rejection records.
const (
	maxRejectionsPage      = 256
	maxRejectionsPageBytes = 1 << 20
)

// handleRejections pages the rejections of the asker's tenant (every
// tenant's, for a service).
func (l *Ledger) handleRejections(ctx context.Context, m *nats.Msg) (any, error) {
	var r api.RejectionsRequest
	if len(m.Data) > 0 {
		if err := decodeRequest(m, &r); err != nil {
			return nil, err
		}
	}
	if r.Session != "" && r.Session != events.UnknownSession {
		if err := events.ValidateSessionID(r.Session); err != nil {
			return nil, api.Errorf(api.CodeInvalidSession, "%v", err)
		}
	}
	limit := r.Limit
	if limit <= 0 || limit > maxRejectionsPage {
		limit = maxRejectionsPage
	}
	tenant := ""
	if p := principalOf(ctx); !p.IsService() {
		tenant = p.Tenant
	}
	reply := api.RejectionsReply{Rejections: []json.RawMessage{}}
	size := 0
	err := l.store.ScanRejections(ctx, tenant, r.Session, r.After+1, func(seq uint64, body []byte) error {
		if len(reply.Rejections) == limit || size+len(body) > maxRejectionsPageBytes && len(reply.Rejections) > 0 {
			reply.More = true
			return errStop
		}
		reply.Rejections = append(reply.Rejections, json.RawMessage(body))
		reply.Next = seq
		size += len(body)
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, unavailable(err)
	}
	return reply, nil
}

// handlePutBlob stores the request body as a blob, within the asker's
// tenant's quota of blob bytes, and answers its reference.
func (l *Ledger) handlePutBlob(ctx context.Context, m *nats.Msg) (any, error) {
	ref, err := l.putBlob(ctx, m.Data)
	if err != nil {
		return nil, unavailable(err)
	}
	return api.BlobRef{Ref: ref}, nil
}

// handleGetBlob answers one page of a blob. A blob is found by its content
// hash, which only the events that reference it carry; there is no listing.
func (l *Ledger) handleGetBlob(ctx context.Context, m *nats.Msg) (any, error) {
	var r api.BlobRequest
	if err := decodeRequest(m, &r); err != nil {
		return nil, err
	}
	if r.Offset < 0 {
		return nil, api.Errorf(api.CodeOutOfRange, "blob offset %d is negative", r.Offset)
	}
	data, size, err := l.store.ReadBlob(ctx, r.Ref, r.Offset, api.BlobPage)
	switch {
	case errors.Is(err, eventstore.ErrNotFound):
		return nil, api.Errorf(api.CodeBlobNotFound, "%v", err)
	case errors.Is(err, eventstore.ErrBadRef):
		return nil, api.Errorf(api.CodeMalformed, "%v", err)
	case err != nil:
		return nil, unavailable(err)
	}
	if r.Offset > size {
		return nil, api.Errorf(api.CodeOutOfRange, "blob %s has %d bytes, offset %d is past its end", r.Ref, size, r.Offset)
	}
	return api.BlobReply{Ref: r.Ref, Size: size, Offset: r.Offset, Data: data}, nil
}
