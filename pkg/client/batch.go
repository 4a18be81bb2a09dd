package client

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// BatchResult is the ledger's decision on one event of a batch: an ack, or
// an *api.Error naming why it was refused.
type BatchResult struct {
	Ack api.Ack
	Err error
}

// AppendBatch proposes events in one request (at most api.MaxBatch) and
// returns each one's decision, in order. Events of one session are appended
// in the batch's order; events of different sessions are appended together,
// which is much cheaper per event than Append when many sessions have work.
// Proposals that failed transiently are sent again with the same event IDs
// until the retry horizon, so each is stored at most once. The error is
// non-nil only when the batch as a whole got no answer or was refused.
//
// The acks are compact receipts (api.HeaderReceipts): an event signed with
// others in a signature record has the record's reference as its Sig and
// the record in Record, shared by the acks it covers. Each is a receipt on
// its own; api.Ack.Inline gives the inline signature that
// events.Keyring.Verify checks.
func (c *Client) AppendBatch(ctx context.Context, evs []event.Event) ([]BatchResult, error) {
	if len(evs) > api.MaxBatch {
		return nil, api.Errorf(api.CodeTooLarge, "%d events in one batch, at most %d", len(evs), api.MaxBatch)
	}
	out := make([]BatchResult, len(evs))
	todo := make([]int, len(evs))
	for i := range todo {
		todo[i] = i
	}
	deadline := time.Now().Add(c.retry)
	backoff := 20 * time.Millisecond
	for {
		msg, err := c.batchRequest(events.OpBatch, len(todo), func(j int) event.Event { return evs[todo[j]] })
		if err != nil {
			return nil, fmt.Errorf("append batch: %w", err)
		}
		var reply api.BatchReply
		if err := c.call(ctx, msg, &reply); err != nil {
			return nil, fmt.Errorf("append batch of %d: %w", len(todo), err)
		}
		if len(reply.Results) != len(todo) {
			return nil, fmt.Errorf("append batch: %d results for %d events", len(reply.Results), len(todo))
		}
		again := todo[:0:0]
		for j, r := range reply.Results {
			i := todo[j]
			switch {
			case r.Ack != nil:
				out[i] = BatchResult{Ack: *r.Ack}
				if err := attachRecord(&out[i].Ack, reply.Records); err != nil {
					out[i] = BatchResult{Err: fmt.Errorf("append %s: %w", evs[i].ID(), err)}
				}
			case r.Error != nil:
				out[i] = BatchResult{Err: r.Error}
				if !api.Permanent(r.Error) {
					again = append(again, i)
				}
			default:
				out[i] = BatchResult{Err: fmt.Errorf("append %s: the ledger's reply has neither ack nor error", evs[i].ID())}
			}
		}
		if len(again) == 0 || time.Now().Add(backoff).After(deadline) {
			return out, nil
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return out, nil
		case <-t.C:
		}
		backoff = min(backoff*2, 2*time.Second)
		todo = again
	}
}

// AppendAtomic proposes events of one session (at most
// eventstore.MaxAtomic) to be stored all or none, in order, in one round
// trip: each is checked as Append would check it, against the state the
// ones before it leave. It returns one ack per event, or the refusal of the
// whole (an *api.Error naming the event it is about). Transient failures are
// retried with the same event IDs: proposing the same events again returns
// their original acks, so they are stored at most once.
func (c *Client) AppendAtomic(ctx context.Context, evs []event.Event) ([]api.Ack, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	msg, err := c.batchRequest(events.OpAtomic, len(evs), func(i int) event.Event { return evs[i] })
	if err != nil {
		return nil, fmt.Errorf("atomic append: %w", err)
	}
	var reply api.BatchReply
	if err := c.call(ctx, msg, &reply); err != nil {
		return nil, fmt.Errorf("atomic append of %d events to session %s: %w", len(evs), evs[0].Subject(), err)
	}
	if len(reply.Results) != len(evs) {
		return nil, fmt.Errorf("atomic append to session %s: %d acks for %d events", evs[0].Subject(), len(reply.Results), len(evs))
	}
	acks := make([]api.Ack, len(evs))
	for i, r := range reply.Results {
		if r.Ack == nil {
			return nil, fmt.Errorf("atomic append to session %s: no ack for event %s", evs[0].Subject(), evs[i].ID())
		}
		acks[i] = *r.Ack
	}
	return acks, nil
}

// batchRequest is a request to the ledger's op whose body is the JSON array
// of n events (the CloudEvents JSON batch format).
func (c *Client) batchRequest(op string, n int, ev func(int) event.Event) (*nats.Msg, error) {
	body := make([]byte, 0, 512*n)
	body = append(body, '[')
	for i := range n {
		e := ev(i)
		raw, err := e.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("event %s: %w", e.ID(), err)
		}
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, raw...)
	}
	body = append(body, ']')
	msg := nats.NewMsg(c.as.Ledger(op))
	msg.Header.Set("Content-Type", api.ContentTypeBatch)
	if op == events.OpBatch {
		msg.Header.Set(api.HeaderReceipts, api.ReceiptsByRecord)
	}
	msg.Data = body
	return msg, nil
}

// attachRecord gives an ack whose signature refers to a signature record
// (a compact batch receipt) that record, from the batch reply's records, so
// that the ack stays a receipt on its own (api.Ack.Inline).
func attachRecord(a *api.Ack, records map[string]json.RawMessage) error {
	ref, isRef, err := events.ParseRecordRef(a.Sig)
	if err != nil || !isRef {
		return err
	}
	rec, ok := records[ref.Record]
	if !ok {
		return fmt.Errorf("the ledger's ack for %s:%d refers to signature record %s, which its reply does not carry", a.Session, a.Seq, ref.Record)
	}
	a.Record = rec
	return nil
}
