package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

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
	switch {
	case len(evs) == 0:
		return Appended{}, fmt.Errorf("atomic append to session %s: no events", session)
	case len(evs) > MaxAtomic:
		return Appended{}, fmt.Errorf("atomic append to session %s: %d events, at most %d", session, len(evs), MaxAtomic)
	}
	size, batch := 0, nuid.Next()
	var reply *nats.Msg
	for i, e := range evs {
		size += len(e.Body)
		msg := appendMsg(ctx, tenant, session, e.Token, e.Body, e.Seq, e.Hash)
		msg.Header.Set(jetstream.MsgIDHeader, MsgID(tenant, e.EventID))
		msg.Header.Set(headerBatchID, batch)
		msg.Header.Set(headerBatchSeq, strconv.Itoa(i+1))
		if i == 0 {
			msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expectLast, 10))
			msg.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, events.SessionFilter(session))
		}
		if i < len(evs)-1 {
			// Staged without an ack: the commit's reply answers for the batch.
			if err := s.nc.PublishMsg(msg); err != nil {
				return Appended{}, fmt.Errorf("atomic append to session %s: %w", session, err)
			}
			continue
		}
		msg.Header.Set(headerBatchCommit, "1")
		var err error
		if reply, err = s.nc.RequestMsgWithContext(ctx, msg); err != nil {
			return Appended{}, fmt.Errorf("atomic append to session %s: %w", session, err)
		}
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
		return Appended{}, fmt.Errorf("atomic append to session %s: unreadable ack %q: %w", session, reply.Data, err)
	}
	if e := ack.Error; e != nil {
		apiErr := &jetstream.APIError{Code: e.Code, ErrorCode: jetstream.ErrorCode(e.ErrCode), Description: e.Desc}
		switch e.ErrCode {
		case errCodeBatchDuplicate:
			return Appended{}, fmt.Errorf("atomic append to session %s: %w: %s", session, ErrDuplicate, e.Desc)
		case errCodeBatchIncomplete, errCodeBatchInflight:
			// Nothing was stored; the server is busy or lost part of the
			// batch on the way: the same batch may be tried again.
			return Appended{}, fmt.Errorf("atomic append to session %s: %w: %w", session, ErrBatchBusy, apiErr)
		}
		return Appended{}, appendErr(session, expectLast, size, apiErr)
	}
	if ack.Count != len(evs) {
		return Appended{}, fmt.Errorf("atomic append to session %s: JetStream stored %d of %d events", session, ack.Count, len(evs))
	}
	return Appended{StreamSeq: ack.Seq}, nil
}

// ErrDuplicate reports an atomic append holding an event ID that is stored
// already: nothing of it was stored.
var ErrDuplicate = errors.New("an event of the batch is stored already")

// ErrBatchBusy reports an atomic append JetStream did not take, with nothing
// stored: too many batches open on the stream, or a batch the server
// abandoned. Trying again later is safe.
var ErrBatchBusy = errors.New("atomic batch not taken")
