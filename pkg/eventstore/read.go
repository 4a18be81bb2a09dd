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

	"github.com/openrath/rath/pkg/events"
)

// ErrNotFound is returned by Get and Last when no message matches.
var ErrNotFound = errors.New("not found")

// Msg is one stored message.
type Msg struct {
	StreamSeq uint64
	Subject   string
	Header    nats.Header
	Body      []byte
}

// Get reads the sessions stream message at a stream sequence.
func (s *Store) Get(ctx context.Context, streamSeq uint64) (Msg, error) {
	m, err := retryRead(ctx, func(ctx context.Context) (*jetstream.RawStreamMsg, error) { return s.sessions.GetMsg(ctx, streamSeq) })
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return Msg{}, fmt.Errorf("stream sequence %d: %w", streamSeq, ErrNotFound)
		}
		return Msg{}, fmt.Errorf("get stream sequence %d: %w", streamSeq, err)
	}
	return Msg{StreamSeq: m.Sequence, Subject: m.Subject, Header: m.Header, Body: m.Data}, nil
}

// Last reads the last stored event of a session.
func (s *Store) Last(ctx context.Context, session string) (Msg, error) {
	m, err := retryRead(ctx, func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
		return s.sessions.GetLastMsgForSubject(ctx, events.SessionFilter(session))
	})
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return Msg{}, fmt.Errorf("last event of session %s: %w", session, ErrNotFound)
		}
		return Msg{}, fmt.Errorf("last event of session %s: %w", session, err)
	}
	return Msg{StreamSeq: m.Sequence, Subject: m.Subject, Header: m.Header, Body: m.Data}, nil
}

// scanBatch is how many messages one batched direct get returns at most;
// firstScanBatch is the first batch of a scan; scanBatchBytes bounds the
// bytes of one batch (the server stops after the message that reaches it),
// so that a caller that stops early, as a page of a log of large events
// does, has not made the server send megabytes it throws away.
const (
	scanBatch      = 512
	firstScanBatch = 16
	scanBatchBytes = 1 << 20
)

type directGetRequest struct {
	Seq      uint64 `json:"seq,omitempty"`
	NextFor  string `json:"next_by_subj,omitempty"`
	Batch    int    `json:"batch,omitempty"`
	UpToSeq  uint64 `json:"up_to_seq,omitempty"`
	MaxBytes int    `json:"max_bytes,omitempty"`
}

// Scan calls fn, in stream order, for each message of stream whose subject
// matches filter, from stream sequence from up to and including upTo (0: to
// the end as of the call). It starts with batched direct gets, which need no
// consumer and are cheap to start; a scan that fills its first batch reads
// the rest with an ordered consumer, which costs the server far less per
// message.
func (s *Store) Scan(ctx context.Context, stream, filter string, from, upTo uint64, fn func(Msg) error) error {
	return Scan(ctx, s.nc, stream, filter, from, upTo, fn)
}

// Scan is Store.Scan for a caller that only has a connection: it needs no
// stream handle, only a stream with direct gets allowed.
func Scan(ctx context.Context, nc *nats.Conn, stream, filter string, from, upTo uint64, fn func(Msg) error) error {
	if from == 0 {
		from = 1
	}
	inbox := nc.NewRespInbox()
	// One request is in flight at a time, answered by at most a batch and
	// its end: a channel that holds that much, not nats.go's 64k-message
	// default for a sync subscription (512 KiB allocated and cleared per
	// scan, that is per hop of every worker).
	msgs := make(chan *nats.Msg, scanBatch+8)
	sub, err := nc.ChanSubscribe(inbox, msgs)
	if err != nil {
		return fmt.Errorf("scan %s: %w", filter, err)
	}
	defer func() { sub.Unsubscribe() }()
	api := "$JS.API.DIRECT.GET." + stream
	stalls := 0
	// Batches start small and double: many scans stop after a few events
	// (an event at N, the first of a session), and the server sends a
	// whole batch whether or not the caller wants it.
	batch := firstScanBatch
scan:
	for upTo == 0 || from <= upTo {
		req, _ := json.Marshal(directGetRequest{Seq: from, NextFor: filter, Batch: batch, UpToSeq: upTo, MaxBytes: scanBatchBytes})
		if err := nc.PublishRequest(api, inbox, req); err != nil {
			return fmt.Errorf("scan %s: %w", filter, err)
		}
		got, more := 0, false
		for {
			m, err := nextMsg(ctx, msgs)
			if errors.Is(err, errStalled) && stalls < maxStalls {
				// The request or its reply was lost (the replica that
				// answers went down, or its node did): ask again from the
				// first sequence not delivered yet, on a fresh inbox so
				// that late replies to the lost request cannot mix in.
				stalls++
				sub.Unsubscribe()
				inbox, msgs = nc.NewRespInbox(), make(chan *nats.Msg, scanBatch+8)
				if sub, err = nc.ChanSubscribe(inbox, msgs); err != nil {
					return fmt.Errorf("scan %s: %w", filter, err)
				}
				continue scan
			}
			if err != nil {
				return fmt.Errorf("scan %s from %d: %w", filter, from, err)
			}
			stalls = 0
			switch status := m.Header.Get("Status"); status {
			case "":
			case "204": // end of batch
				// A batch can end early (byte limit): go on while the
				// server says more match.
				np, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				more = got > 0 && np > 0
			case "404":
				return nil
			default:
				return fmt.Errorf("scan %s from %d: direct get status %s %s", filter, from, status, m.Header.Get("Description"))
			}
			if m.Header.Get("Status") == "204" {
				break
			}
			seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
			if err != nil {
				return fmt.Errorf("scan %s: bad %s header: %w", filter, jetstream.SequenceHeader, err)
			}
			got++
			from = seq + 1
			if upTo != 0 && seq > upTo {
				continue // past the bound (the server's pending count may reach beyond it)
			}
			if err := fn(Msg{StreamSeq: seq, Subject: m.Header.Get(jetstream.SubjectHeader), Header: m.Header, Body: m.Data}); err != nil {
				return err
			}
		}
		if !more {
			return nil
		}
		if got == batch && batch == scanBatch {
			// A long read: an ordered consumer streams the rest at a
			// fraction of the server's cost per message of direct gets.
			return streamRest(ctx, nc, stream, filter, from, upTo, fn)
		}
		if got == batch {
			batch = min(2*batch, scanBatch)
		}
	}
	return nil
}

// streamRest reads the rest of a long scan with an ordered consumer: flow
// controlled, no reply per batch, no per-message header block.
func streamRest(ctx context.Context, nc *nats.Conn, stream, filter string, from, upTo uint64, fn func(Msg) error) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("scan %s: %w", filter, err)
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    from,
	})
	if err != nil {
		return fmt.Errorf("scan %s from %d: %w", filter, from, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(scanBatch))
	if err != nil {
		return fmt.Errorf("scan %s from %d: %w", filter, from, err)
	}
	defer it.Stop()
	next := []jetstream.NextOpt{jetstream.NextMaxWait(scanWait)}
	if _, ok := ctx.Deadline(); ok {
		next = []jetstream.NextOpt{jetstream.NextContext(ctx)}
	}
	for {
		m, err := it.Next(next...)
		if err != nil {
			return fmt.Errorf("scan %s from %d: %w", filter, from, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("scan %s: %w", filter, err)
		}
		seq := meta.Sequence.Stream
		if upTo != 0 && seq > upTo {
			return nil
		}
		if err := fn(Msg{StreamSeq: seq, Subject: m.Subject(), Header: m.Headers(), Body: m.Data()}); err != nil {
			return err
		}
		if meta.NumPending == 0 || seq == upTo {
			return nil
		}
		from = seq + 1
	}
}

// scanWait bounds the wait for the ordered consumer's next message when
// the caller's context has no deadline, so a scan never hangs.
const scanWait = 10 * time.Second

// directGetStall is how long a scan waits for the next direct get reply
// before it asks again (at most maxStalls times in a row): replies come
// in a burst within milliseconds, and on a cluster a replica that goes
// down takes the request with it, which would otherwise hold the caller
// (a ledger appending, the session locked) until its deadline.
const (
	directGetStall = 2 * time.Second
	maxStalls      = 10
)

// errStalled reports that no direct get reply came within directGetStall.
var errStalled = errors.New("no direct get reply")

func nextMsg(ctx context.Context, msgs <-chan *nats.Msg) (*nats.Msg, error) {
	t := time.NewTimer(directGetStall)
	defer t.Stop()
	select {
	case m := <-msgs:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, errStalled
	}
}

// ScanSession calls fn for each stored event of one session's own log (not
// its fork ancestry), from stream sequence from on.
func (s *Store) ScanSession(ctx context.Context, session string, from, upTo uint64, fn func(Msg) error) error {
	return s.Scan(ctx, events.StreamSessions, events.SessionFilter(session), from, upTo, fn)
}

// First reads the first stored event of a session.
func (s *Store) First(ctx context.Context, session string) (Msg, error) {
	m, err := s.sessions.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(events.SessionFilter(session)))
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return Msg{}, fmt.Errorf("first event of session %s: %w", session, ErrNotFound)
		}
		return Msg{}, fmt.Errorf("first event of session %s: %w", session, err)
	}
	return Msg{StreamSeq: m.Sequence, Subject: m.Subject, Header: m.Header, Body: m.Data}, nil
}

// parseBatch is how many messages the reader hands the parser at once.
const parseBatch = 64

// ScanParsed is ScanSession with each body parsed. Reading and parsing run
// on two goroutines, so a long replay costs about the read alone; fn runs
// on the caller's goroutine, in stream order. An error from fn (errStop
// sentinels included) ends the scan and is returned as is.
func (s *Store) ScanParsed(ctx context.Context, session string, from, upTo uint64, fn func(events.Stored, Msg) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan []Msg, 16)
	var scanErr error
	go func() {
		defer close(batches)
		batch := make([]Msg, 0, parseBatch)
		send := func() error {
			select {
			case batches <- batch:
				batch = make([]Msg, 0, parseBatch)
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		scanErr = s.ScanSession(ctx, session, from, upTo, func(m Msg) error {
			batch = append(batch, m)
			if len(batch) == parseBatch {
				return send()
			}
			return nil
		})
		if scanErr == nil && len(batch) > 0 {
			scanErr = send()
		}
	}()
	fail := func(err error) error {
		cancel()
		for range batches { // let the reader finish
		}
		return err
	}
	for batch := range batches {
		for _, m := range batch {
			ev, err := events.ParseStored(m.Body)
			if err != nil {
				return fail(fmt.Errorf("session %s at stream %d: %w", session, m.StreamSeq, err))
			}
			if err := fn(ev, m); err != nil {
				return fail(err)
			}
		}
	}
	return scanErr
}
