// Package eventstore is Rath's access to JetStream: it creates the streams and
// buckets, appends sealed events with per-session optimistic concurrency, and
// reads sessions back. It knows subjects and bytes, not session semantics.
package eventstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/pkg/events"
)

// Config says how the streams and buckets are created.
type Config struct {
	// Replicas per stream and bucket: 1 on a single server, 3 on a cluster.
	Replicas int
	// DedupeWindow is how long JetStream remembers an event ID, so that a
	// retried append is stored once. It must exceed every client's retry
	// horizon (the Go client retries for at most RetryHorizon).
	DedupeWindow time.Duration
	// MaxEventSize bounds one stored event body.
	MaxEventSize int32
	// MaxSnapshotSize bounds one stored snapshot; larger ones are skipped.
	MaxSnapshotSize int32
	// RejectsMaxAge is how long rejected proposals are kept.
	RejectsMaxAge time.Duration
}

// RetryHorizon is the longest a Rath client keeps retrying one proposal.
const RetryHorizon = 2 * time.Minute

// DefaultConfig is right for one embedded server.
func DefaultConfig() Config {
	return Config{
		Replicas:        1,
		DedupeWindow:    10 * time.Minute,
		MaxEventSize:    1 << 20,
		MaxSnapshotSize: 8 << 20,
		RejectsMaxAge:   30 * 24 * time.Hour,
	}
}

// Validate reports every problem of the configuration at once.
func (c Config) Validate() error {
	var errs []error
	if c.Replicas < 1 || c.Replicas > 5 {
		errs = append(errs, fmt.Errorf("replicas must be 1..5, got %d", c.Replicas))
	}
	if c.DedupeWindow <= RetryHorizon {
		errs = append(errs, fmt.Errorf("dedupe window %s must exceed the client retry horizon %s", c.DedupeWindow, RetryHorizon))
	}
	if c.MaxEventSize <= 0 || c.MaxSnapshotSize <= 0 {
		errs = append(errs, errors.New("max event and snapshot sizes must be positive"))
	}
	return errors.Join(errs...)
}

// Store reads and writes Rath's streams and buckets.
type Store struct {
	nc        *nats.Conn
	js        jetstream.JetStream
	sessions  jetstream.Stream
	inbox     jetstream.Stream
	sigs      jetstream.Stream // nil in an attached store: the ledger's alone
	snapshots jetstream.KeyValue
	index     jetstream.KeyValue
	blobs     jetstream.ObjectStore
	tools     jetstream.KeyValue
	heads     jetstream.KeyValue // nil in an attached store: the ledger's alone
	cfg       Config
	log       *slog.Logger // what the store waits for (WithLogger)
	// catalog, once WatchCatalog made one, takes this store's own index
	// writes at once.
	catalog atomic.Pointer[Catalog]
}

// Open creates (or updates) the streams and buckets and returns a Store. It is
// idempotent: every process may call it at start. On a cluster that is still
// forming (no meta leader yet, a node down, too few peers for the replicas)
// it waits, making each request again with growing pauses and logging what
// it waits for (WithLogger), until it succeeds or ctx ends.
func Open(ctx context.Context, nc *nats.Conn, cfg Config, opts ...OpenOption) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("event store config: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("event store: %w", err)
	}
	log := openOpts(opts).log
	s := &Store{nc: nc, js: js, cfg: cfg, log: log}
	// Every stream is file-backed, replicated alike, deduplicates message IDs
	// over the same window and serves direct gets.
	stream := func(c jetstream.StreamConfig) (jetstream.Stream, error) {
		c.Storage, c.Replicas, c.Duplicates, c.AllowDirect = jetstream.FileStorage, cfg.Replicas, cfg.DedupeWindow, true
		var st jetstream.Stream
		err := WhileForming(ctx, log, "create stream "+c.Name, func(ctx context.Context) (err error) {
			st, err = js.CreateOrUpdateStream(ctx, c)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("create stream %s: %w", c.Name, err)
		}
		return st, nil
	}
	kv := func(c jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
		var b jetstream.KeyValue
		err := WhileForming(ctx, log, "create bucket "+c.Bucket, func(ctx context.Context) (err error) {
			b, err = js.CreateOrUpdateKeyValue(ctx, c)
			return err
		})
		return b, err
	}
	if s.sessions, err = stream(jetstream.StreamConfig{
		Name:        events.StreamSessions,
		Description: "Rath: every accepted session event, on " + events.SessionSubject("<tenant>", "<session>", "<kind>") + "; republished on " + events.LiveSubject("<tenant>", "<session>", "<kind>"),
		Subjects:    []string{events.SessionsWildcard},
		Retention:   jetstream.LimitsPolicy,
		MaxMsgSize:  cfg.MaxEventSize,
		RePublish:   &jetstream.RePublish{Source: events.SessionsWildcard, Destination: events.LiveWildcard},
		// A model's answer is stored all or nothing (AppendAtomic).
		AllowAtomicPublish: true,
	}); err != nil {
		return nil, err
	}
	if s.sigs, err = stream(jetstream.StreamConfig{
		Name:        events.StreamSigs,
		Description: "Rath: the ledger's signature records, on " + events.SigRecordSubject("<record ID>") + ": the leaves of a group signature that batched events refer to",
		Subjects:    []string{events.SigsWildcard},
		Retention:   jetstream.LimitsPolicy,
	}); err != nil {
		return nil, err
	}
	if s.inbox, err = stream(jetstream.StreamConfig{
		Name:        events.StreamInbox,
		Description: "Rath: fire-and-forget proposals awaiting the ledger",
		Subjects:    []string{events.InboxWildcard},
		Retention:   jetstream.WorkQueuePolicy,
		MaxMsgSize:  cfg.MaxEventSize,
	}); err != nil {
		return nil, err
	}
	if _, err = stream(jetstream.StreamConfig{
		Name:        events.StreamTimers,
		Description: "Rath: durable timers, set on " + events.TimerSubject("<session>", "<timer>") + " as message schedules and fired once to " + events.TimerFiredSubject("<session>", "<timer>"),
		Subjects:    []string{events.TimersWildcard},
		// A fired timer leaves once its consumer acked it; a schedule
		// leaves when it fires (the server purges it).
		Retention:         jetstream.WorkQueuePolicy,
		AllowMsgSchedules: true,
	}); err != nil {
		return nil, err
	}
	if _, err = stream(jetstream.StreamConfig{
		Name:        events.StreamRejects,
		Description: "Rath: rejected proposals with the reason",
		Subjects:    []string{events.RejectsWildcard},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      cfg.RejectsMaxAge,
	}); err != nil {
		return nil, err
	}
	if _, err = stream(jetstream.StreamConfig{
		Name:        events.StreamDead,
		Description: "Rath: events a handler gave up on, with the error",
		Subjects:    []string{events.DeadWildcard},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      cfg.RejectsMaxAge,
	}); err != nil {
		return nil, err
	}
	if s.snapshots, err = kv(jetstream.KeyValueConfig{
		Bucket:       events.BucketSnapshots,
		Description:  "Rath: folded session states every K events, key <session>.<seq>",
		History:      1,
		MaxValueSize: cfg.MaxSnapshotSize,
		Storage:      jetstream.FileStorage,
		Replicas:     cfg.Replicas,
	}); err != nil {
		return nil, fmt.Errorf("create bucket %s: %w", events.BucketSnapshots, err)
	}
	if s.index, err = kv(jetstream.KeyValueConfig{
		Bucket:      events.BucketSessions,
		Description: "Rath: session index (s.<session>) and fork links (c.<parent>.<child>)",
		History:     8,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
	}); err != nil {
		return nil, fmt.Errorf("create bucket %s: %w", events.BucketSessions, err)
	}
	if s.tools, err = kv(jetstream.KeyValueConfig{
		Bucket:      events.BucketTools,
		Description: "Rath: tool registry, key = tool name",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
	}); err != nil {
		return nil, fmt.Errorf("create bucket %s: %w", events.BucketTools, err)
	}
	if s.heads, err = kv(jetstream.KeyValueConfig{
		Bucket:      events.BucketHeads,
		Description: "Rath: each session's last signed head (a receipt of its last event), key = session",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
	}); err != nil {
		return nil, fmt.Errorf("create bucket %s: %w", events.BucketHeads, err)
	}
	if err = WhileForming(ctx, log, "create object store "+events.BucketBlobs, func(ctx context.Context) (err error) {
		s.blobs, err = js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      events.BucketBlobs,
			Description: "Rath: large evidence by content hash (sha256:<hex>)",
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
		})
		return err
	}); err != nil {
		return nil, fmt.Errorf("create object store %s: %w", events.BucketBlobs, err)
	}
	return s, nil
}

// JetStream returns the JetStream context the store uses.
func (s *Store) JetStream() jetstream.JetStream { return s.js }

// Conn returns the NATS connection the store uses.
func (s *Store) Conn() *nats.Conn { return s.nc }

// Attach binds to the streams and buckets a ledger created, creating and
// changing nothing: for tools (the CLI) that must not alter a deployment's
// configuration, such as its replica count.
func Attach(ctx context.Context, nc *nats.Conn) (*Store, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("event store: %w", err)
	}
	s := &Store{nc: nc, js: js, cfg: DefaultConfig(), log: openOpts(nil).log}
	if s.sessions, err = js.Stream(ctx, events.StreamSessions); err != nil {
		return nil, fmt.Errorf("attach %s: %w", events.StreamSessions, err)
	}
	if s.inbox, err = js.Stream(ctx, events.StreamInbox); err != nil {
		return nil, fmt.Errorf("attach %s: %w", events.StreamInbox, err)
	}
	if s.snapshots, err = js.KeyValue(ctx, events.BucketSnapshots); err != nil {
		return nil, fmt.Errorf("attach %s: %w", events.BucketSnapshots, err)
	}
	if s.index, err = js.KeyValue(ctx, events.BucketSessions); err != nil {
		return nil, fmt.Errorf("attach %s: %w", events.BucketSessions, err)
	}
	if s.tools, err = js.KeyValue(ctx, events.BucketTools); err != nil {
		return nil, fmt.Errorf("attach %s: %w", events.BucketTools, err)
	}
	if s.blobs, err = js.ObjectStore(ctx, events.BucketBlobs); err != nil {
		return nil, fmt.Errorf("attach %s: %w", events.BucketBlobs, err)
	}
	return s, nil
}

// ErrForbidden is AttachWait's error when the connection's identity may not
// use the ledger's streams.
var ErrForbidden = errors.New("this identity may not read the ledger's streams")

// attachAttempt bounds the first attempt of AttachWait, doubling up to
// createAttemptMax: an attempt is six requests, and one that goes
// unanswered (a node that hangs, a reply lost to a reconnect) must cost an
// attempt, not the caller's whole deadline.
const attachAttempt = 2 * time.Second

// AttachWait attaches like Attach, waiting (with growing pauses) until a
// ledger has created the streams and buckets: worker services start in any
// order and never create or reconfigure what the ledger owns. Each attempt
// is bounded, so a request that is never answered is asked again. It says
// what it waits for on the logger WithLogger names. A connection whose
// identity the server refuses those requests fails at once with
// ErrForbidden.
func AttachWait(ctx context.Context, nc *nats.Conn, opts ...OpenOption) (*Store, error) {
	log := openOpts(opts).log
	started := time.Now()
	bound := attachAttempt
	// A connection's last error stays until it reconnects: only a refusal
	// that comes after this call, of a JetStream request, is this one's.
	before := nc.LastError()
	for attempt, wait := 1, 50*time.Millisecond; ; attempt, wait, bound = attempt+1, min(wait*2, 2*time.Second), min(bound*2, createAttemptMax) {
		actx, cancel := context.WithTimeout(ctx, bound)
		s, err := Attach(actx, nc)
		cancel()
		if err == nil {
			if attempt > 1 {
				log.Info("attached to the ledger's streams", "waited", time.Since(started).Round(time.Millisecond))
			}
			s.log = log
			return s, nil
		}
		if last := nc.LastError(); last != before && errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), "$JS.API.") {
			// Streams this identity may not read never appear: the server
			// refused the request (reported apart from it, so the attempt
			// itself only timed out).
			return nil, fmt.Errorf("%w: %w (a program that serves agents or routers connects as the agent worker, agent-worker.nk; one that serves tools as the tool runner, tool-runner.nk; a user's program reads through the ledger)", ErrForbidden, last)
		}
		// A first miss is the usual start (the ledger creates the streams
		// meanwhile): said at Info only once the wait is longer.
		level := slog.LevelDebug
		if attempt%10 == 0 {
			level = slog.LevelInfo
		}
		if attempt == 1 || attempt%10 == 0 {
			log.Log(ctx, level, "waiting for the ledger's streams and buckets (or a forming JetStream cluster)", "attempt", attempt, "waited", time.Since(started).Round(time.Millisecond), "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (waiting for the ledger's streams: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}
