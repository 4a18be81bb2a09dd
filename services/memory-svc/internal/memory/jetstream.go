package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/memoryapi"
)

// StreamConfig says how RATH_MEMORY is created.
type StreamConfig struct {
	// Replicas of the stream: 1 on one server, 3 on a cluster.
	Replicas int
	// DedupeWindow is how long a write's dedupe ID is remembered.
	DedupeWindow time.Duration
}

// JetStream is the Backend on the JetStream stream RATH_MEMORY: one subject
// per item (rath.mem.item.<item>), every record a message, no per-subject
// limit, deletes and purges denied, so no version is ever lost.
type JetStream struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	log    *slog.Logger
}

// OpenJetStream creates (or updates) RATH_MEMORY and returns the backend.
// It is idempotent: every memory service process calls it at start.
func OpenJetStream(ctx context.Context, nc *nats.Conn, cfg StreamConfig, log *slog.Logger) (*JetStream, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("memory backend: %w", err)
	}
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        memoryapi.Stream,
		Description: "Rath: memory items, every version and retraction, on rath.mem.item.<item>",
		Subjects:    []string{memoryapi.ItemsWildcard},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		Duplicates:  cfg.DedupeWindow,
		AllowDirect: true,
		DenyDelete:  true,
		DenyPurge:   true,
		MaxMsgSize:  1 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("create stream %s: %w", memoryapi.Stream, err)
	}
	return &JetStream{js: js, stream: st, log: log}, nil
}

// Last reads the item's last record with a direct get.
func (b *JetStream) Last(ctx context.Context, itemID string) (*memoryapi.Record, uint64, error) {
	m, err := b.stream.GetLastMsgForSubject(ctx, memoryapi.ItemSubject(itemID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read item %s: %w", itemID, err)
	}
	rec, err := decodeRecord(m.Data, m.Sequence)
	if err != nil {
		return nil, 0, fmt.Errorf("read item %s: %w", itemID, err)
	}
	return rec, m.Sequence, nil
}

// Append publishes the record on the item's subject, expecting the
// subject's last message at stream sequence expect.
func (b *JetStream) Append(ctx context.Context, rec memoryapi.Record, expect uint64, dedupeID string) (uint64, error) {
	body, err := json.Marshal(rec)
	if err != nil {
		return 0, fmt.Errorf("append to item %s: %w", rec.ItemID, err)
	}
	ack, err := b.js.Publish(ctx, memoryapi.ItemSubject(rec.ItemID), body,
		jetstream.WithMsgID(dedupeID), jetstream.WithExpectLastSequencePerSubject(expect))
	if err != nil {
		if detail, ok := eventstore.WrongLastSequence(err); ok {
			return 0, fmt.Errorf("append to item %s after %d: %w (%s)", rec.ItemID, expect, ErrConflict, detail)
		}
		return 0, fmt.Errorf("append to item %s: %w", rec.ItemID, err)
	}
	return ack.Sequence, nil
}

// Head returns the stream's last sequence.
func (b *JetStream) Head(ctx context.Context) (uint64, error) {
	info, err := b.stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream %s info: %w", memoryapi.Stream, err)
	}
	return info.State.LastSeq, nil
}

// Follow reads the whole stream with an ordered consumer, then follows it.
func (b *JetStream) Follow(ctx context.Context, fn func(memoryapi.Record, uint64) error) (func() error, error) {
	f, err := follow(ctx, b.stream, jetstream.OrderedConsumerConfig{}, func(m jetstream.Msg, meta *jetstream.MsgMetadata) error {
		rec, err := decodeRecord(m.Data(), meta.Sequence.Stream)
		if err != nil || rec.ItemID == "" {
			// Not written by a memory service: skipped, never applied.
			b.log.Warn("memory: unreadable record skipped", "stream_seq", meta.Sequence.Stream, "subject", m.Subject(), "err", err)
			rec = &memoryapi.Record{Seq: meta.Sequence.Stream}
		}
		return fn(*rec, meta.Sequence.Stream)
	})
	if err != nil {
		return nil, err
	}
	return f.wait, nil
}

func decodeRecord(data []byte, seq uint64) (*memoryapi.Record, error) {
	var rec memoryapi.Record
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("decode memory record: %w", err)
	}
	rec.Seq = seq
	return &rec, nil
}

// consumerPatience bounds how long orderedConsumer tries again: a cluster
// elects a new leader in seconds.
const consumerPatience = time.Minute

// orderedConsumer creates an ordered consumer, trying again while the
// server does not answer in time (a cluster whose JetStream leader was
// lost while the service starts answers once it has elected another),
// for consumerPatience at the most.
func orderedConsumer(ctx context.Context, st jetstream.Stream, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	ctx, cancel := context.WithTimeout(ctx, consumerPatience)
	defer cancel()
	var cons jetstream.Consumer
	err := eventstore.WhileForming(ctx, slog.New(slog.DiscardHandler), "create an ordered consumer", func(ctx context.Context) (err error) {
		cons, err = st.OrderedConsumer(ctx, cfg)
		return err
	})
	return cons, err
}

// follower runs an ordered consumer's handler on one goroutine.
type follower struct {
	cons jetstream.Consumer
	done chan struct{}
	err  error
}

func (f *follower) wait() error {
	<-f.done
	return f.err
}

// follow consumes a stream with an ordered consumer from its first message,
// calling fn in order, until ctx ends or fn fails (the error is kept: a
// follower that cannot apply a record stops rather than skip it).
func follow(ctx context.Context, st jetstream.Stream, cfg jetstream.OrderedConsumerConfig, fn func(jetstream.Msg, *jetstream.MsgMetadata) error) (*follower, error) {
	cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	cons, err := orderedConsumer(ctx, st, cfg)
	if err != nil {
		return nil, fmt.Errorf("follow %s: %w", st.CachedInfo().Config.Name, err)
	}
	f := &follower{cons: cons, done: make(chan struct{})}
	fctx, stop := context.WithCancel(ctx)
	var (
		mu     sync.Mutex
		failed error
	)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if failed != nil {
			return
		}
		meta, err := m.Metadata()
		if err == nil {
			err = fn(m, meta)
		}
		if err != nil {
			failed = err
			stop()
		}
	})
	if err != nil {
		stop()
		return nil, fmt.Errorf("follow %s: %w", st.CachedInfo().Config.Name, err)
	}
	go func() {
		defer close(f.done)
		<-fctx.Done()
		cc.Stop()
		<-cc.Closed()
		stop()
		mu.Lock()
		f.err = failed
		mu.Unlock()
	}()
	return f, nil
}
