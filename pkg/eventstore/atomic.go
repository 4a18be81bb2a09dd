package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/openrath/rath/pkg/events"
)

// Sealed is one event of an atomic append: its kind's subject token, its
// sealed body, its ID and its place in the session's chain.
type Sealed struct {
	Token   string
	Body    []byte
	EventID string
	Seq     uint64
	Hash    string
}

// MaxAtomic is the most events one atomic append may carry (JetStream's
// default limit on an atomic batch is 1,000 messages).
const MaxAtomic = 1000

// JetStream's headers of an atomic batch publish (nats-server 2.12+; stream
// AllowAtomicPublish).
const (
	headerBatchID     = "Nats-Batch-Id"
	headerBatchSeq    = "Nats-Batch-Sequence"
	headerBatchCommit = "Nats-Batch-Commit"
)

// JetStream's error codes for an atomic batch whose message ID is stored
// already, and for one the server gave up on.
const (
	errCodeBatchDuplicate  = 10201 // JSAtomicPublishContainsDuplicateMessageErr
	errCodeBatchIncomplete = 10176 // JSAtomicPublishIncompleteBatchErr
	errCodeBatchInflight   = 10210 // JSAtomicPublishTooManyInflight
)

// AppendAtomic stores the events of one session all or nothing, in one
// round trip: a JetStream atomic batch whose first message expects the
// session's last stored event at stream sequence expectLast (0: none yet).
// Every message carries its event's ID as message ID, so a batch holding an
// event stored already is refused whole (ErrDuplicate). The result is the
// stream sequence of the batch's last event; the events before it are at
// the sequences just below it.
func (s *Store) AppendAtomic(ctx context.Context, tenant, session string, evs []Sealed, expectLast uint64) (Appended, error) {
	if len(evs) > MaxAtomic {
		return Appended{}, fmt.Errorf("atomic append to session %s: %d events, at most %d", session, len(evs), MaxAtomic)
	}
	size := 0
	msgs := make([]*nats.Msg, len(evs))
	for i, e := range evs {
		size += len(e.Body)
		msgs[i] = appendMsg(ctx, tenant, session, e.Token, e.Body, e.Seq, e.Hash)
		msgs[i].Header.Set(jetstream.MsgIDHeader, MsgID(tenant, e.EventID))
	}
	last, err := s.publishAtomic(ctx, msgs, events.SessionFilter(session), expectLast)
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return Appended{StreamSeq: last}, nil
	case errors.Is(err, ErrDuplicate), errors.Is(err, ErrBatchBusy), !errors.As(err, &apiErr):
		return Appended{}, fmt.Errorf("atomic append to session %s: %w", session, err)
	}
	return Appended{}, appendErr(session, expectLast, size, apiErr)
}

// publishAtomic is PublishAtomic attempt by attempt, as publish does for
// one message: a commit with no reply within its bound (the stream's leader
// lost mid-batch, or no leader yet) is published again as a new batch, with
// the same message IDs, until ctx ends, instead of waiting out the
// caller's deadline (the ledger's 30 s: agent turns stalled that long when
// a cluster's leader was killed). A repeat of a batch that was stored is
// refused as a duplicate or a wrong last sequence, which the ledger
// resolves by reading the session; it is never stored twice.
func (s *Store) publishAtomic(ctx context.Context, msgs []*nats.Msg, filter string, expectLast uint64) (uint64, error) {
	started := time.Now()
	last, n, err := attempts(ctx, ackAttempt, func(actx context.Context) (uint64, error) {
		return PublishAtomic(actx, s.nc, msgs, filter, expectLast)
	}, func(bound time.Duration, err error) {
		s.log.Warn("no reply to an atomic append's commit: publishing the batch again (the stream's leader may be lost; a new one is elected)", "filter", filter, "after", bound, "err", err)
	})
	if err == nil && n > 1 {
		s.log.Info("atomic append acknowledged after the stream's leader was lost or slow", "filter", filter, "attempts", n, "waited", time.Since(started).Round(time.Millisecond))
	}
	return last, err
}

// PublishAtomic publishes msgs (with their headers, message IDs included)
// as one JetStream atomic batch: all stored or none, the first only if the
// last message on filter is at stream sequence expectLast (0: there is
// none). The messages before the last are staged without an ack; the
// commit's reply answers for the batch. It returns the stream sequence of
// the last message; a refusal is ErrDuplicate, ErrBatchBusy or the
// server's *jetstream.APIError.
func PublishAtomic(ctx context.Context, nc *nats.Conn, msgs []*nats.Msg, filter string, expectLast uint64) (uint64, error) {
	if len(msgs) == 0 {
		return 0, errors.New("atomic batch: no messages")
	}
	batch := nuid.Next()
	for i, msg := range msgs {
		if msg.Header == nil {
			msg.Header = nats.Header{}
		}
		msg.Header.Set(headerBatchID, batch)
		msg.Header.Set(headerBatchSeq, strconv.Itoa(i+1))
		if i == 0 {
			msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expectLast, 10))
			msg.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, filter)
		}
		if i < len(msgs)-1 {
			if err := nc.PublishMsg(msg); err != nil {
				return 0, err
			}
		}
	}
	commit := msgs[len(msgs)-1]
	commit.Header.Set(headerBatchCommit, "1")
	reply, err := nc.RequestMsgWithContext(ctx, commit)
	if err != nil {
		return 0, err
	}
	var ack struct {
		Seq   uint64 `json:"seq"`
		Count int    `json:"count"`
		Error *struct {
			Code    int    `json:"code"`
			ErrCode int    `json:"err_code"`
			Desc    string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &ack); err != nil {
		return 0, fmt.Errorf("unreadable ack %q: %w", reply.Data, err)
	}
	if e := ack.Error; e != nil {
		apiErr := &jetstream.APIError{Code: e.Code, ErrorCode: jetstream.ErrorCode(e.ErrCode), Description: e.Desc}
		switch e.ErrCode {
		case errCodeBatchDuplicate:
			return 0, fmt.Errorf("%w: %s", ErrDuplicate, e.Desc)
		case errCodeBatchIncomplete, errCodeBatchInflight:
			// Nothing was stored; the server is busy or lost part of the
			// batch on the way: the same batch may be tried again.
			return 0, fmt.Errorf("%w: %w", ErrBatchBusy, apiErr)
		}
		return 0, apiErr
	}
	if ack.Count != len(msgs) {
		return 0, fmt.Errorf("JetStream stored %d of %d messages", ack.Count, len(msgs))
	}
	return ack.Seq, nil
}

// ErrDuplicate reports an atomic append holding an event ID that is stored
// already: nothing of it was stored.
var ErrDuplicate = errors.New("an event of the batch is stored already")

// ErrBatchBusy reports an atomic append JetStream did not take, with nothing
// stored: too many batches open on the stream, or a batch the server
// abandoned. Trying again later is safe.
var ErrBatchBusy = errors.New("atomic batch not taken")
