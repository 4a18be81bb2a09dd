package selector

import (
	"context"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// HandOff takes a rath.agent.turn.requested the selector appended, as the
// ledger stored and acked it, with its stream sequence: in one process, the
// agent worker's consume.Local.Hand (ADR 0038 item 5).
type HandOff func(ev events.Stored, streamSeq uint64)

// WithHandOff has the selector hand each turn request it appends to hand,
// once the ledger acked it. The request is still delivered through
// JetStream as before; a hand-off only starts the turn sooner.
func WithHandOff(hand HandOff) Option { return func(s *Selector) { s.hand = hand } }

// request appends a turn request to session id and hands it off.
func (s *Selector) request(ctx context.Context, id string, req *events.TurnRequested, opts []events.Option) error {
	ev, err := events.New(id, req, opts...)
	if err != nil {
		return err
	}
	a, err := s.c.Append(ctx, ev)
	if err != nil {
		return err
	}
	// A duplicate's ack is an earlier append's, whose event was stored at
	// another time: its own delivery, or its own hand-off, takes it.
	if s.hand != nil && !a.Duplicate {
		s.hand(acked(ev, a, s.c.Principal()), a.StreamSeq)
	}
	return nil
}

// acked is the stored form of ev, proposed by p, as the ledger acked it:
// the proposal's attributes and data, with what the ledger set (sequence,
// hash, signature, actor). It lacks what the ack does not carry: the
// previous event's hash (Prev) and the stored body (Raw); its Data is the
// proposal's JSON, the same value as the stored canonical form.
func acked(ev event.Event, a api.Ack, p events.Principal) events.Stored {
	return events.Stored{
		ID: a.ID, Source: ev.Source(), Type: ev.Type(), Session: a.Session, Time: ev.Time(),
		Seq: a.Seq, Hash: a.Hash, Sig: a.Sig, Causation: events.Causation(ev), Correlation: events.Correlation(ev),
		Actor: p.String(), Data: ev.Data(),
	}
}
