package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

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

// AppendBatch decides a batch of proposals, each as Append would, and returns
// their outcomes in the batch's order. Proposals to one session are appended
// in the batch's order; proposals to different sessions are published
// together, without waiting for each other's acks, in rounds of one event per
// session. That is where a batch is faster than single appends: JetStream
// acks a round's appends in one pipelined burst instead of one round trip
// each. Anything out of the ordinary (a refusal to look into, a conflict with
// another ledger) is handed to the single-event path, so its rules hold here
// unchanged.
func (l *Ledger) AppendBatch(ctx context.Context, evs []event.Event) []BatchResult {
	res := make([]BatchResult, len(evs))
	expect := make([]expectation, len(evs))
	assigned := make([]bool, len(evs))
	queues := map[string][]int{}
	for i := range evs {
		ev := &evs[i]
		if err := refuseOperation(ev.Type()); err != nil {
			res[i].Err = err
			continue
		}
		assigned[i] = ev.Subject() == ""
		if err := l.check(ev); err != nil {
			res[i].Err = err
			continue
		}
		expect[i] = takeExpectation(ev)
		queues[ev.Subject()] = append(queues[ev.Subject()], i)
	}
	round := make([]string, 0, len(queues))
	for len(queues) > 0 {
		round = round[:0]
		for id := range queues {
			round = append(round, id)
		}
		// Every round locks its sessions in one global order, so two
		// batches sharing sessions cannot deadlock.
		slices.Sort(round)
		heads := make([]int, len(round))
		for j, id := range round {
			heads[j] = queues[id][0]
			if q := queues[id][1:]; len(q) > 0 {
				queues[id] = q
			} else {
				delete(queues, id)
			}
		}
		l.appendRound(ctx, evs, expect, heads, res)
	}
	last := map[string]api.Ack{} // each session's new head
	created := map[string]bool{} // sessions the batch started
	for i := range res {
		if a := res[i].Ack; res[i].Err == nil && a.Duplicate && a.Session != evs[i].Subject() && !assigned[i] {
			res[i] = BatchResult{Err: duplicateID(a)}
		}
		if a := res[i].Ack; res[i].Err == nil && !a.Duplicate && a.Seq > last[a.Session].Seq {
			last[a.Session] = a
		}
		if a := res[i].Ack; res[i].Err == nil && !a.Duplicate && a.Seq == 1 {
			created[a.Session] = true
		}
	}
	for id, a := range last {
		l.heads.record(a, created[id])
	}
	return res
}

// BatchResult is the outcome of one proposal of a batch: an ack or a refusal.
// The ack of an event signed in a signature record is a compact receipt:
// its Sig is the reference the stored body carries, its Record the record
// (RecordID names it), which the acks it covers share; Ack.Inline, or the
// ledger's receipt, spells the inline signature.
type BatchResult struct {
	Ack      api.Ack
	Err      error
	RecordID string
}

// inflight is an append of a round published and not yet acknowledged. Its
// session's entry stays locked until the ack is in.
type inflight struct {
	i       int
	e       *entry
	j       int // index in the round's signatures
	sealed  sealed
	tenant  string
	pending *eventstore.PendingAppend
}

// appendRound appends evs[i] for each i in heads, all to different sessions.
func (l *Ledger) appendRound(ctx context.Context, evs []event.Event, expect []expectation, heads []int, res []BatchResult) {
	var (
		flying []inflight
		slow   []int
	)
	var sealedOnes []inflight
	for _, i := range heads {
		f, ok, err := l.seal(ctx, evs[i:i+1], expect[i])
		switch {
		case err != nil:
			res[i].Err = err
		case !ok:
			slow = append(slow, i)
		default:
			f.i = i
			sealedOnes = append(sealedOnes, f)
		}
	}
	// The round's events are signed together: one signature per group,
	// whose leaves are stored once, before the events (signRound).
	leaves := make([]events.Leaf, len(sealedOnes))
	for j, f := range sealedOnes {
		leaves[j] = events.Leaf{Session: f.e.id, Seq: f.sealed.seq, Hash: f.sealed.hash}
	}
	sigs, err := l.sign.signRound(leaves)
	if err == nil && len(sigs.records) > 0 {
		if err = l.store.PutSigRecords(ctx, sigs.records); err == nil {
			l.cacheRecords(sigs.records)
		}
	}
	if err != nil {
		for _, f := range sealedOnes {
			f.e.mu.Unlock()
			res[f.i].Err = unavailable(err)
		}
		sealedOnes = nil
	}
	for j, f := range sealedOnes {
		f.j = j
		if err := l.send(ctx, &evs[f.i], &f, sigs.stored[j]); err != nil {
			res[f.i].Err = err
			continue
		}
		flying = append(flying, f)
	}
	for _, f := range flying {
		r, err := f.pending.Wait(ctx)
		switch {
		case err == nil && !r.Duplicate:
			acks, err := l.stored(ctx, f.e, f.e.state, evs[f.i:f.i+1], []sealed{f.sealed}, r.StreamSeq)
			f.e.mu.Unlock()
			if res[f.i].Err = err; err == nil {
				res[f.i].Ack = acks[0]
			}
			if k := sigs.record[f.j]; k >= 0 && res[f.i].Err == nil {
				res[f.i].RecordID, res[f.i].Ack.Record = sigs.records[k].ID, sigs.records[k].Record
			}
		case err == nil:
			f.e.mu.Unlock()
			res[f.i].Ack, res[f.i].Err = l.ackAt(ctx, r.StreamSeq)
		case eventstore.IsConflict(err):
			f.e.mu.Unlock()
			slow = append(slow, f.i)
		case errors.Is(err, eventstore.ErrTooLarge):
			f.e.mu.Unlock()
			res[f.i].Err = api.Errorf(api.CodeTooLarge, "%v", err)
		default:
			f.e.mu.Unlock()
			res[f.i].Err = unavailable(err)
		}
	}
	for _, i := range slow {
		acks, err := l.commit(ctx, []event.Event{evs[i]}, expect[i], commitOpts{})
		if res[i].Err = err; err == nil {
			res[i].Ack = acks[0]
		}
	}
}

// seal seals one event of a batch (one[0]) onto its session's cached
// head, unsigned, as commit would; send signs and publishes it. On success
// the session's entry stays locked for the caller. It reports false,
// holding nothing, when commit should decide the event instead.
func (l *Ledger) seal(ctx context.Context, one []event.Event, x expectation) (inflight, bool, error) {
	id := one[0].Subject()
	e := l.entry(id)
	e.mu.Lock()
	if !e.loaded {
		if err := l.load(ctx, e); err != nil {
			e.mu.Unlock()
			return inflight{}, false, unavailable(err)
		}
	}
	if admit(ctx, e.state, id, one[0].Type()) != nil {
		e.mu.Unlock()
		return inflight{}, false, nil // commit refuses
	}
	if _, ok := e.lately(one[0].ID()); ok {
		e.mu.Unlock()
		return inflight{}, false, nil // commit answers with the same ack
	}
	_, ss, stale, err := l.sealAll(ctx, e, one, x, commitOpts{})
	if stale {
		e.mu.Unlock()
		return inflight{}, false, nil // refresh, look for a stored retry, refuse
	}
	if err == nil && e.state == nil {
		err = l.takeStart(ctx, id)
	}
	if err != nil {
		e.mu.Unlock()
		return inflight{}, false, err
	}
	return inflight{e: e, sealed: ss[0], tenant: tenantFor(&one[0], e.state)}, true, nil
}

// send attaches the signature to an event seal sealed and publishes it
// without waiting; on an error it unlocks the session's entry.
func (l *Ledger) send(ctx context.Context, ev *event.Event, f *inflight, sig string) error {
	// seal checked the size with the longest signature (fits).
	f.sealed.body = events.AttachSig(ev, f.sealed.body, sig)
	p, err := l.store.AppendAsync(ctx, f.tenant, f.e.id, f.sealed.kind.Token, f.sealed.body, ev.ID(), f.sealed.seq, f.sealed.hash, f.e.streamSeq)
	if err != nil {
		f.e.mu.Unlock()
		return unavailable(err)
	}
	f.pending = p
	return nil
}

// handleBatch answers a batch request: a JSON array of structured-mode
// CloudEvents. Each proposal is decided on its own; each refusal is recorded
// on the rejections stream like a single proposal's. A body that is not an
// array of at most api.MaxBatch items is refused (and recorded) as a whole.
func (l *Ledger) handleBatch(ctx context.Context, m *nats.Msg) (any, error) {
	ctx = tracing.Extract(ctx, m.Header)
	ctx, span := tracing.Tracer("session-ledger").Start(ctx, "rath.ledger.batch", trace.WithSpanKind(trace.SpanKindConsumer))
	defer span.End()
	var items []jsoniter.RawMessage
	if err := jsoniter.ConfigFastest.Unmarshal(m.Data, &items); err != nil {
		refusal := api.Errorf(api.CodeMalformed, "%s: the body must be a JSON array of structured CloudEvents (%s): %v", m.Subject, api.ContentTypeBatch, err)
		return nil, l.recordRejection(ctx, m, "batch", event.Event{}, refusal, "")
	}
	if len(items) > api.MaxBatch {
		refusal := api.Errorf(api.CodeTooLarge, "%s: %d proposals in one batch, at most %d", m.Subject, len(items), api.MaxBatch)
		return nil, l.recordRejection(ctx, m, "batch", event.Event{}, refusal, "")
	}
	span.SetAttributes(attribute.Int("rath.batch", len(items)))
	tp := tracing.Traceparent(ctx)
	evs := make([]event.Event, 0, len(items))
	where := make([]int, 0, len(items)) // index in items of each parsed event
	out := make([]api.BatchResult, len(items))
	for i, raw := range items {
		ev, err := events.FromNATS(nil, raw)
		if err != nil {
			out[i].Error = l.refusal(ctx, m, raw, event.Event{}, api.Errorf(api.CodeMalformed, "proposal %d of the batch: %v", i, err))
			continue
		}
		if tp != "" && events.Traceparent(ev) == "" {
			ev.SetExtension(events.ExtTraceparent, tp)
		}
		evs = append(evs, ev)
		where = append(where, i)
	}
	compact := m.Header.Get(api.HeaderReceipts) == api.ReceiptsByRecord
	var records map[string]json.RawMessage
	for j, r := range l.AppendBatch(ctx, evs) {
		i := where[j]
		if r.Err == nil && r.RecordID != "" && !compact {
			r.Ack, r.Err = l.receipt(ctx, r.Ack)
		}
		if r.Err == nil {
			if compact && r.RecordID != "" {
				if records == nil {
					records = map[string]json.RawMessage{}
				}
				records[r.RecordID] = r.Ack.Record
				r.Ack.Record = nil // once per reply, in records
			}
			out[i].Ack = &r.Ack
			continue
		}
		if api.Permanent(r.Err) {
			out[i].Error = l.refusal(ctx, m, items[i], evs[j], r.Err)
		} else {
			out[i].Error = asAPIError(r.Err)
		}
	}
	return api.BatchReply{Results: out, Records: records}, nil
}

// refusal records a refused proposal of a batch and returns what the
// batch's reply says of it.
func (l *Ledger) refusal(ctx context.Context, m *nats.Msg, raw []byte, ev event.Event, err error) *api.Error {
	one := &nats.Msg{Subject: m.Subject, Header: m.Header, Data: raw}
	return asAPIError(l.recordRejection(ctx, one, "batch", ev, err, ""))
}

func asAPIError(err error) *api.Error {
	var le *api.Error
	if errors.As(err, &le) {
		return le
	}
	return &api.Error{Code: api.CodeUnavailable, Message: err.Error()}
}
