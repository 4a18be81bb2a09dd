package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The raw JetStream reference stream: file storage and the sessions stream's
// dedupe window, without the ledger, on subjects of its own.
const (
	rawStream       = "BENCH_RAW"
	rawPrefixAsync  = "bench.async"
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
