package eventstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/pkg/events"
)

// PutSigRecords stores signature records (events.SignRecord) and waits until
// every one is acknowledged: the events that refer to a record are published
// only after it is stored, so no stored event ever names a record that is
// not there. A record is stored once per ID (its message ID).
func (s *Store) PutSigRecords(ctx context.Context, recs []events.RecordSigs) error {
	if s.sigs == nil {
		return errors.New("store signature records: the store is attached, not opened by a ledger")
	}
	futures := make([]jetstream.PubAckFuture, 0, len(recs))
	for _, r := range recs {
		msg := &nats.Msg{Subject: events.SigRecordSubject(r.ID), Data: r.Record}
		f, err := s.js.PublishMsgAsync(msg, jetstream.WithMsgID("sig."+r.ID), jetstream.WithStallWait(asyncStallWait))
		if err != nil {
			return fmt.Errorf("store signature record %s: %w", r.ID, err)
		}
		futures = append(futures, f)
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("store signature record %s: %w", recs[i].ID, err)
		case <-ctx.Done():
			return fmt.Errorf("store signature record %s: %w", recs[i].ID, ctx.Err())
		}
	}
	return nil
}

// SigRecord reads the signature record with the given ID; ErrNotFound if
// there is none.
func (s *Store) SigRecord(ctx context.Context, id string) ([]byte, error) {
	if s.sigs == nil {
		return nil, errors.New("read signature record: the store is attached, not opened by a ledger")
	}
	m, err := s.sigs.GetLastMsgForSubject(ctx, events.SigRecordSubject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("signature record %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("signature record %s: %w", id, err)
	}
	return m.Data, nil
}
