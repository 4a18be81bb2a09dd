package eventstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/pkg/events"
)

// FirstProposal reads the oldest proposal still in the inbox for a session.
// The inbox is a work queue: a decided proposal is acked and gone, so the
// oldest one left is the next to decide in publish order.
func (s *Store) FirstProposal(ctx context.Context, session string) (Msg, error) {
	m, err := s.inbox.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(events.InboxFilter(session)))
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return Msg{}, fmt.Errorf("inbox of %s: %w", session, ErrNotFound)
		}
		return Msg{}, fmt.Errorf("inbox of %s: %w", session, err)
	}
	return Msg{StreamSeq: m.Sequence, Subject: m.Subject, Header: m.Header, Body: m.Data}, nil
}

// RemoveProposal deletes a decided proposal from the inbox (one decided out
// of its delivery turn). Already gone is fine.
func (s *Store) RemoveProposal(ctx context.Context, seq uint64) error {
	err := s.inbox.DeleteMsg(ctx, seq)
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) && !errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
		return fmt.Errorf("remove proposal %d from the inbox: %w", seq, err)
	}
	return nil
}
