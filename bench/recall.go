package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/memoryapi"
	memory "github.com/openrath/rath/services/memory-svc/service"
)

// Full-scale sizes of the recall section: items in the store for the
// rebuild (R3), adds through the service for the write figure (R1).
const (
	recallItems   = 100_000
	recallWrites  = 5_000
	recallWorkers = 32
)

// memoryRun is a memory service running in this process.
type memoryRun struct {
	stop func() error
}

func (h *harness) startMemoryService(ctx context.Context) (*memoryRun, error) {
	nc, err := h.connect(auth.RoleMemory, "rath-bench-memory", false)
	if err != nil {
		return nil, err
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- memory.Run(mctx, nc, memory.DefaultConfig(), slog.New(slog.DiscardHandler)) }()
	return &memoryRun{stop: func() error {
		cancel()
		err := <-done
		nc.Close()
		return err
	}}, nil
}

// runRecall is the recall section: memory writes through the memory
// service (a version stored, recorded in a session through the ledger)
// against the JetStream work they cannot do without (R1), and the service's
// start with 100k items in the store (R3). The search itself is
// BenchmarkSearch in services/memory-svc/internal/memory.
func (h *harness) runRecall(ctx context.Context) error {
	svc, err := h.startMemoryService(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if svc != nil {
			_ = svc.stop()
		}
	}()
	mem := h.cli.Memory()
	// The session the seeded items name as their provenance.
	if _, err := h.cli.Start(ctx, "bench-recall", events.SessionStarted{Task: "bench recall"}); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(7, 11))

	// Writes: new items through the service, recallWorkers in flight, each
	// recorded in one of recallWorkers sessions (appends to one session
	// are sequential by design: throughput comes from many sessions).
	for i := range recallWorkers {
		if _, err := h.cli.Start(ctx, sessionID("memw", i), events.SessionStarted{Task: "bench memory writes"}); err != nil {
			return err
		}
	}
	n := max(200, int(float64(recallWrites)*h.cfg.scale))
	h.logf("recall: %d memory writes through the service, %d in flight over %d sessions", n, recallWorkers, recallWorkers)
	texts := make([]string, n)
	for i := range texts {
		texts[i] = memoryText(rng, i)
	}
	start := time.Now()
	err = parallel(ctx, n, recallWorkers, func(ctx context.Context, i int) error {
		_, err := mem.Add(ctx, memoryapi.AddRequest{Session: sessionID("memw", i%recallWorkers), Content: texts[i], Scope: "project:bench",
			Tags: []string{fmt.Sprintf("t%d", i%10)}, Evidence: memoryapi.EvidenceToolResult})
		return err
	})
	if err != nil {
		return fmt.Errorf("memory writes: %w", err)
	}
	writes := rate{n: n, d: time.Since(start)}
	raw, err := rawMemoryWrites(ctx, h.js, n)
	if err != nil {
		return err
	}
	h.rep.add(row{
		id: "R1", what: fmt.Sprintf("memory writes (memory add: session check + direct get + conditional publish + ledger append), %d in flight over %d sessions", recallWorkers, recallWorkers),
		rath: writes.String(), rawWhat: fmt.Sprintf("publish with expected-last-subject-seq, new subjects, %d in flight", recallWorkers),
		raw: raw.String(), ratio: fmtRatio(speedRatio(writes, raw)),
	})

	// Seeded straight into the store: R3 rebuilds the index from it.
	total := max(n, 1000, int(float64(recallItems)*h.cfg.scale))
	js, err := jetstream.New(h.ncRaw)
	if err != nil {
		return err
	}
	h.logf("recall: seeding the store to %d items", total)
	if err := seedMemory(ctx, js, rng, n, total); err != nil {
		return err
	}

	// Rebuild: a fresh memory service reads the whole stream at start.
	if err := svc.stop(); err != nil {
		return err
	}
	svc = nil
	t0 := time.Now()
	if svc, err = h.startMemoryService(ctx); err != nil {
		return err
	}
	if _, err := mem.Search(ctx, memoryapi.SearchRequest{Query: "warm up"}); err != nil {
		return err
	}
	h.rep.add(row{id: "R3", what: fmt.Sprintf("memory service start: index rebuilt from %d records, first answer", total), rath: fmtDur(time.Since(t0))})
	h.rep.note("recall section: the items beyond the %d written through the service were published straight into %s (the service's record format) so that seeding %d items takes seconds; recall does not depend on how items were written", n, memoryapi.Stream, total)
	return nil
}

// memoryWords is the vocabulary of generated memory items: word i is
// drawn with probability ~1/(i+1) (Zipf-like), as in prose.
var memoryWords = func() []string {
	out := make([]string, 2000)
	for i := range out {
		out[i] = fmt.Sprintf("w%04d", i)
	}
	return out
}()

func zipfWord(rng *rand.Rand) string {
	// Inverse transform of a 1/x density over [1, N+1).
	n := float64(len(memoryWords) + 1)
	x := int(math.Exp(rng.Float64()*math.Log(n))) - 1
	return memoryWords[min(max(x, 0), len(memoryWords)-1)]
}

func memoryText(rng *rand.Rand, i int) string {
	words := make([]string, 24)
	for j := range words {
		words[j] = zipfWord(rng)
	}
	return fmt.Sprintf("item %d: %s", i, strings.Join(words, " "))
}

// seedMemory publishes version-1 records of items from..to-1 straight into
// RATH_MEMORY, asynchronously.
func seedMemory(ctx context.Context, js jetstream.JetStream, rng *rand.Rand, from, to int) error {
	now := time.Now().UTC()
	for i := from; i < to; i++ {
		id := fmt.Sprintf("mem-seed-%07d", i)
		body, err := json.Marshal(memoryapi.Record{ItemID: id, Op: memoryapi.OpWrite, Version: 1, Versions: 1,
			Content: memoryText(rng, i), Scope: "project:bench", Tags: []string{fmt.Sprintf("t%d", i%10)},
			Provenance: &events.Provenance{Session: "bench-recall", Evidence: memoryapi.EvidenceToolResult},
			Session:    "bench-recall", EventID: events.DerivedID("seed", id), RequestID: id, Time: now})
		if err != nil {
			return err
		}
		if _, err := js.PublishAsync(memoryapi.ItemSubject(id), body); err != nil {
			return err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// rawMemoryWrites publishes n messages to new subjects of the raw stream
// with an expected-last-subject-sequence of 0, recallWorkers in flight.
func rawMemoryWrites(ctx context.Context, js jetstream.JetStream, n int) (rate, error) {
	body := make([]byte, 300)
	stamp := time.Now().UnixNano()
	start := time.Now()
	err := parallel(ctx, n, recallWorkers, func(ctx context.Context, i int) error {
		_, err := js.Publish(ctx, fmt.Sprintf("bench.mem.%d.%d", stamp, i), body, jetstream.WithExpectLastSequencePerSubject(0))
		return err
	})
	return rate{n: n, d: time.Since(start)}, err
}
