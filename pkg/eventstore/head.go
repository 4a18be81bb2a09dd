package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/pkg/events"
)

// Head is a session's last signed head as the ledger recorded it apart from
// the log: the receipt of the session's last event (Sig is that event's
// rathsig, which signs Session, Seq and Hash). A log that ends before it was
// cut; a head record that lags the log only means the ledger stopped between
// storing an event and recording it, since every event is signed itself.
type Head struct {
	Session string `json:"session"`
	Seq     uint64 `json:"seq"`
	Hash    string `json:"hash"`
	Sig     string `json:"sig"`
}

// PutHeadAsync records a session's head without waiting for the ack: the
// record may lag the log, never lead it (it is written after the event is
// stored). A failure is reported to the connection's async error handler.
func (s *Store) PutHeadAsync(h Head) error {
	if s.heads == nil {
		return errors.New("record head: the store is attached, not opened by a ledger")
	}
	b, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("record head of %s: %w", h.Session, err)
	}
	msg := &nats.Msg{Subject: "$KV." + events.BucketHeads + "." + h.Session, Data: b}
	if _, err := s.js.PublishMsgAsync(msg, jetstream.WithStallWait(asyncStallWait)); err != nil {
		return fmt.Errorf("record head of %s: %w", h.Session, err)
	}
	return nil
}

// GetHead reads a session's recorded head; ErrNotFound if none was recorded.
func (s *Store) GetHead(ctx context.Context, session string) (Head, error) {
	if s.heads == nil {
		return Head{}, errors.New("read head: the store is attached, not opened by a ledger")
	}
	e, err := retryRead(ctx, func(ctx context.Context) (jetstream.KeyValueEntry, error) { return s.heads.Get(ctx, session) })
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Head{}, ErrNotFound
	}
	if err != nil {
		return Head{}, fmt.Errorf("read head of %s: %w", session, err)
	}
	var h Head
	if err := json.Unmarshal(e.Value(), &h); err != nil {
		return Head{}, fmt.Errorf("read head of %s: %w", session, err)
	}
	return h, nil
}

// LastFromLeader reads a session's last stored event from the stream's
// leader (the JetStream message-get API, not a direct get, which any replica
// may answer from behind). A verdict that events are gone is confirmed with
// it, so a lagging replica cannot make a session look cut.
func (s *Store) LastFromLeader(ctx context.Context, session string) (Msg, error) {
	m, err := s.getFromLeader(ctx, map[string]any{"last_by_subj": events.SessionFilter(session)})
	if err != nil {
		return Msg{}, fmt.Errorf("last event of session %s: %w", session, err)
	}
	return m, nil
}

// NextFromLeader reads the first event of RATH_SESSIONS at or after stream
// sequence from on a subject matching filter (wildcards allowed), from the
// stream's leader; ErrNotFound if there is none. A follower of the stream
// asks it to learn whether an event it has not applied yet was stored
// before a point: a consumer's pending count may not count it yet.
func (s *Store) NextFromLeader(ctx context.Context, filter string, from uint64) (Msg, error) {
	m, err := s.getFromLeader(ctx, map[string]any{"seq": from, "next_by_subj": filter})
	if err != nil {
		return Msg{}, fmt.Errorf("next event on %s from %d: %w", filter, from, err)
	}
	return m, nil
}

// getFromLeader asks RATH_SESSIONS's leader for one message.
func (s *Store) getFromLeader(ctx context.Context, request map[string]any) (Msg, error) {
	req, _ := json.Marshal(request)
	reply, err := retryRead(ctx, func(ctx context.Context) (*nats.Msg, error) {
		return s.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+events.StreamSessions, req)
	})
	if err != nil {
		return Msg{}, fmt.Errorf("from the leader: %w", err)
	}
	var resp struct {
		Message *struct {
			Subject string `json:"subject"`
			Seq     uint64 `json:"seq"`
			Data    []byte `json:"data"`
		} `json:"message"`
		Error *struct {
			Code    int    `json:"code"`
			ErrCode int    `json:"err_code"`
			Desc    string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return Msg{}, fmt.Errorf("from the leader: %w", err)
	}
	switch {
	case resp.Error != nil && resp.Error.Code == 404:
		return Msg{}, ErrNotFound
	case resp.Error != nil:
		return Msg{}, fmt.Errorf("from the leader: %s (%d)", resp.Error.Desc, resp.Error.ErrCode)
	case resp.Message == nil:
		return Msg{}, errors.New("from the leader: empty reply")
	}
	return Msg{StreamSeq: resp.Message.Seq, Subject: resp.Message.Subject, Body: resp.Message.Data}, nil
}
