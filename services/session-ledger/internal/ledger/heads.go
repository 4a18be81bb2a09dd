package ledger

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// headBook records sessions' signed heads apart from their logs (the
// rath-heads bucket), coalesced. A session's first head is recorded at once:
// from then on its ID can never start again. Later heads wait up to
// Config.HeadEvery (1 s by default), and only the latest of each session is
// written: one bucket write per busy session per second instead of one per
// append, which was ~13 % of a pipelined append's cost (docs/benchmarks.md,
// issue 10). At 100 ms, 256 sessions appending in batches still wrote one
// head record for every four or five events.
//
// What the wait costs: a head record may lag the log by up to HeadEvery, and
// after a crash the heads not yet written are lost. A tail cut in that window
// is not shown by verify's comparison with the record; the running ledger
// that stored it still refuses to append below it, and the signed receipts
// the clients hold prove each event (rath verify --receipt). A lagging record
// never makes a session look cut, since it is written after the event.
type headBook struct {
	store *eventstore.Store
	log   *slog.Logger
	every time.Duration
	// expand spells a head's signature inline (Ledger.fullSig): a head
	// recorded from a batch refers to its signature record until written.
	expand func(context.Context, string) (string, error)

	mu      sync.Mutex
	waiting map[string]eventstore.Head // the latest unrecorded head per session
}

func newHeadBook(store *eventstore.Store, every time.Duration, log *slog.Logger, expand func(context.Context, string) (string, error)) *headBook {
	return &headBook{store: store, log: log, every: every, expand: expand, waiting: map[string]eventstore.Head{}}
}

// record takes a session's new head. first says the append created the
// session (its first event, or a fork's): that head is written at once.
func (b *headBook) record(a api.Ack, first bool) {
	if b == nil { // an unsigned ledger (the bench's baseline) records none
		return
	}
	h := eventstore.Head{Session: a.Session, Seq: a.Seq, Hash: a.Hash, Sig: a.Sig}
	if first || b.every <= 0 {
		b.put(h)
		return
	}
	b.mu.Lock()
	if p, ok := b.waiting[h.Session]; !ok || p.Seq < h.Seq {
		b.waiting[h.Session] = h
	}
	b.mu.Unlock()
}

// pending returns the head of a session waiting to be recorded, if any.
func (b *headBook) pending(id string) (uint64, bool) {
	if b == nil {
		return 0, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	h, ok := b.waiting[id]
	return h.Seq, ok
}

// flush writes every pending head without waiting for the acks.
func (b *headBook) flush() {
	if b == nil {
		return
	}
	b.mu.Lock()
	waiting := b.waiting
	if len(waiting) == 0 {
		b.mu.Unlock()
		return
	}
	b.waiting = make(map[string]eventstore.Head, len(waiting))
	b.mu.Unlock()
	for _, h := range waiting {
		b.put(h)
	}
}

func (b *headBook) put(h eventstore.Head) {
	sig, err := b.expand(context.Background(), h.Sig)
	if err != nil {
		b.log.Warn("head not recorded: its signature does not expand", "session", h.Session, "seq", h.Seq, "err", err)
		return
	}
	h.Sig = sig
	if err := b.store.PutHeadAsync(h); err != nil {
		b.log.Warn("head not recorded", "session", h.Session, "seq", h.Seq, "err", err)
	}
}

// run flushes the pending heads every interval until ctx ends (Serve writes
// the rest once its handlers are done: FlushHeads).
func (b *headBook) run(ctx context.Context) {
	if b == nil || b.every <= 0 {
		return
	}
	t := time.NewTicker(b.every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			b.flush()
		case <-ctx.Done():
			return
		}
	}
}

// FlushHeads writes every head still waiting and returns once JetStream has
// acknowledged them (or ctx ends). Serve does this when it stops; a caller
// that appends without Serve calls it before reading the heads bucket.
func (l *Ledger) FlushHeads(ctx context.Context) error {
	l.heads.flush()
	select {
	case <-l.store.JetStream().PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("record heads: %w", ctx.Err())
	}
}
