package eventstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/pkg/events"
)

// Rejection is the record of a refused proposal on the rejections stream.
type Rejection struct {
	Time    time.Time `json:"time"`
	Session string    `json:"session,omitempty"`
	EventID string    `json:"event_id,omitempty"`
	Type    string    `json:"type,omitempty"`
	// Actor is who proposed it (tenant/user), from the subject it arrived on;
	// Tenant is that actor's tenant, under which it is recorded.
	Actor   string `json:"actor,omitempty"`
	Tenant  string `json:"tenant,omitempty"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Via is how the proposal arrived: "request" or "inbox".
	Via string `json:"via"`
	// Proposal is the proposal as received: the body, and headers if any.
	Proposal       json.RawMessage     `json:"proposal,omitempty"`
	ProposalText   string              `json:"proposal_text,omitempty"`
	ProposalHeader map[string][]string `json:"proposal_header,omitempty"`
	Ledger         string              `json:"ledger,omitempty"`
	StreamSeq      uint64              `json:"stream_seq,omitempty"`
}

// Reject records a rejection and waits for JetStream to store it. A
// non-empty key records one rejection per key within the dedupe window.
func (s *Store) Reject(ctx context.Context, r Rejection, key string) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("record rejection: %w", err)
	}
	var opts []jetstream.PublishOpt
	if key != "" {
		opts = append(opts, jetstream.WithMsgID(key))
	}
	if _, err := s.js.Publish(ctx, events.RejectSubject(r.Tenant, r.Session), b, opts...); err != nil {
		return fmt.Errorf("record rejection of %s: %w", r.EventID, err)
	}
	return nil
}

// Rejections calls fn for each recorded rejection from stream sequence from
// on, oldest first, of proposals by one tenant ("": any) about one session
// ("": any).
func (s *Store) Rejections(ctx context.Context, tenant, session string, from uint64, fn func(seq uint64, r Rejection) error) error {
	return s.ScanRejections(ctx, tenant, session, from, func(seq uint64, body []byte) error {
		var r Rejection
		if err := json.Unmarshal(body, &r); err != nil {
			return fmt.Errorf("rejection at %d: %w", seq, err)
		}
		r.StreamSeq = seq
		return fn(seq, r)
	})
}

// ScanRejections is Rejections with each record's stored body, undecoded.
func (s *Store) ScanRejections(ctx context.Context, tenant, session string, from uint64, fn func(seq uint64, body []byte) error) error {
	return Scan(ctx, s.nc, events.StreamRejects, events.RejectFilter(tenant, session), from, 0, func(m Msg) error {
		return fn(m.StreamSeq, m.Body)
	})
}
