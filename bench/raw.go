package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/pkg/eventstore"
)

// The raw JetStream reference stream: file storage and the sessions stream's
// dedupe window, without the ledger. Raw runs use their own subject prefixes
// so that conditional publishes start on empty subjects.
const (
	rawStream       = "BENCH_RAW"
	rawPrefixAsync  = "bench.async"
	rawPrefixCond   = "bench.cond"
	rawPrefixAtomic = "bench.atomic"
	rawPrefixSeq    = "bench.seq"
	rawPrefixFork   = "bench.fork"
	asyncWindow     = 4000
	asyncStallWait  = 30 * time.Second
	rawDedupeWindow = 10 * time.Minute
)

func createRawStream(ctx context.Context, js jetstream.JetStream) error {
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        rawStream,
		Subjects:    []string{"bench.>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Duplicates:  rawDedupeWindow,
		AllowDirect: true,
		// Rows 1d‴ measure JetStream's atomic batch publish.
		AllowAtomicPublish: true,
	})
	if err != nil {
		return fmt.Errorf("create stream %s: %w", rawStream, err)
	}
	return nil
}

// rawAsync publishes every message with PublishMsgAsync (window 4000, a long
// stall wait) and returns once all are acknowledged.
func rawAsync(ctx context.Context, nc *nats.Conn, msgs []rawMsg) (rate, error) {
	var failed atomic.Int64
	var firstErr atomic.Value
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(asyncWindow),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, err)
		}))
	if err != nil {
		return rate{}, err
	}
	start := time.Now()
	for _, m := range msgs {
		if _, err := js.PublishMsgAsync(&nats.Msg{Subject: m.subject, Data: m.body}, jetstream.WithStallWait(asyncStallWait)); err != nil {
			return rate{}, fmt.Errorf("raw async publish: %w", err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return rate{}, fmt.Errorf("raw async publish: %w", ctx.Err())
	}
	r := rate{n: len(msgs), d: time.Since(start)}
	if n := failed.Load(); n > 0 {
		return r, fmt.Errorf("raw async publish: %d of %d failed, first: %v", n, len(msgs), firstErr.Load())
	}
	return r, nil
}

// condPublish publishes one message only if the last message on its
// session's subjects is at stream sequence last, with its event ID as message
// ID: what the event store does for every append.
func condPublish(ctx context.Context, js jetstream.JetStream, m rawMsg, filter string, last uint64) (uint64, error) {
	ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: m.subject, Data: m.body},
		jetstream.WithMsgID(m.id), jetstream.WithExpectLastSequenceForSubject(last, filter))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// rawCondSequential publishes one session's messages one at a time, each
// conditional on the previous one.
func rawCondSequential(ctx context.Context, js jetstream.JetStream, msgs []rawMsg, filter string) (rate, latencies, error) {
	lats := make(latencies, 0, len(msgs))
	var last uint64
	start := time.Now()
	for _, m := range msgs {
		t := time.Now()
		seq, err := condPublish(ctx, js, m, filter, last)
		if err != nil {
			return rate{}, nil, fmt.Errorf("raw conditional publish: %w", err)
		}
		lats = append(lats, time.Since(t))
		last = seq
	}
	return rate{n: len(msgs), d: time.Since(start)}, lats, nil
}

// rawCondConcurrent runs one goroutine per session, each publishing its
// session's messages one at a time, conditionally: the ceiling of any
// appender that keeps each session's log linear.
func rawCondConcurrent(ctx context.Context, js jetstream.JetStream, perSession [][]rawMsg, filters []string) (rate, error) {
	var (
		wg    sync.WaitGroup
		total atomic.Int64
		mu    sync.Mutex
		errs  []error
	)
	start := time.Now()
	for i, msgs := range perSession {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last uint64
			for _, m := range msgs {
				seq, err := condPublish(ctx, js, m, filters[i], last)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				last = seq
				total.Add(1)
			}
		}()
	}
	wg.Wait()
	r := rate{n: int(total.Load()), d: time.Since(start)}
	if len(errs) > 0 {
		return r, fmt.Errorf("raw conditional publish (%d sessions): %d failed, first: %w", len(perSession), len(errs), errs[0])
	}
	return r, nil
}

// rawCondRounds publishes each session's messages conditionally, with
// message IDs, in rounds: one async publish per session, then all acks,
// then the next round. It is what the ledger's batch path asks of
// JetStream, without the ledger: the ceiling of any appender that keeps each
// session's log linear and deduplicated while pipelining across sessions.
func rawCondRounds(ctx context.Context, nc *nats.Conn, perSession [][]rawMsg, filters []string) (rate, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(asyncWindow))
	if err != nil {
		return rate{}, err
	}
	last := make([]uint64, len(perSession))
	futures := make([]jetstream.PubAckFuture, len(perSession))
	n := 0
	start := time.Now()
	for k := 0; ; k++ {
		sent := 0
		for i, msgs := range perSession {
			futures[i] = nil
			if k >= len(msgs) {
				continue
			}
			m := msgs[k]
			f, err := js.PublishMsgAsync(&nats.Msg{Subject: m.subject, Data: m.body},
				jetstream.WithMsgID(m.id), jetstream.WithExpectLastSequenceForSubject(last[i], filters[i]),
				jetstream.WithStallWait(asyncStallWait))
			if err != nil {
				return rate{}, fmt.Errorf("raw conditional async publish: %w", err)
			}
			futures[i] = f
			sent++
		}
		if sent == 0 {
			return rate{n: n, d: time.Since(start)}, nil
		}
		for i, f := range futures {
			if f == nil {
				continue
			}
			select {
			case ack := <-f.Ok():
				last[i] = ack.Sequence
				n++
			case err := <-f.Err():
				return rate{}, fmt.Errorf("raw conditional async publish: %w", err)
			case <-ctx.Done():
				return rate{}, ctx.Err()
			}
		}
	}
}

// atomicInflight is how many atomic batches rawCondAtomic keeps open at once:
// JetStream allows 50 per stream by default.
const atomicInflight = 48

// rawCondAtomic stores each session's messages in atomic batches of k, the
// first message of each conditional on the session's last stream sequence,
// every message with its message ID: the JetStream work of storing k events
// of a session all or none, as the ledger's atomic append does. Up to
// atomicInflight sessions have a batch open at once; a session's batches go
// one after another.
func rawCondAtomic(ctx context.Context, nc *nats.Conn, perSession [][]rawMsg, filters []string, k int) (rate, error) {
	var (
		total atomic.Int64
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	next := make(chan int, len(perSession))
	for i := range perSession {
		next <- i
	}
	close(next)
	start := time.Now()
	for range min(atomicInflight, len(perSession)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				var last uint64
				msgs := perSession[i]
				for len(msgs) > 0 {
					b := msgs[:min(k, len(msgs))]
					msgs = msgs[len(b):]
					seq, err := atomicBatch(ctx, nc, b, filters[i], last)
					if err != nil {
						mu.Lock()
						if first == nil {
							first = err
						}
						mu.Unlock()
						return
					}
					last = seq
					total.Add(int64(len(b)))
				}
			}
		}()
	}
	wg.Wait()
	r := rate{n: int(total.Load()), d: time.Since(start)}
	if first != nil {
		return r, fmt.Errorf("raw atomic batches of %d: %w", k, first)
	}
	return r, nil
}

// atomicBatch publishes msgs as one JetStream atomic batch, each with its
// message ID, the first conditional on last (eventstore.PublishAtomic, the
// event store's own batch protocol, on the raw stream's subjects).
func atomicBatch(ctx context.Context, nc *nats.Conn, msgs []rawMsg, filter string, last uint64) (uint64, error) {
	out := make([]*nats.Msg, len(msgs))
	for i, m := range msgs {
		out[i] = &nats.Msg{Subject: m.subject, Data: m.body, Header: nats.Header{jetstream.MsgIDHeader: []string{m.id}}}
	}
	return eventstore.PublishAtomic(ctx, nc, out, filter, last)
}
