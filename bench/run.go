package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/embedded"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
)

// harness is one benchmark run: the embedded server, the ledger process, the
// connections and the report being filled.
type harness struct {
	cfg     config
	logw    io.Writer
	started time.Time
	env     environment
	rep     report
	pay     payloads
	dir     string

	ns     *server.Server
	ecfg   embedded.Config     // ns's configuration (users are added to it)
	creds  *auth.Set           // every role's identity: the server authenticates each connection
	ncRaw  *nats.Conn          // raw JetStream runs and direct reads
	ncCli  *nats.Conn          // the Rath client's connection
	js     jetstream.JetStream // on ncRaw
	store  *eventstore.Store   // on ncRaw: reads of Rath's streams
	stream jetstream.Stream    // RATH_SESSIONS, for counts and direct gets
	cli    *client.Client      // appends: retries transient failures
	qcli   *client.Client      // reads, forks: one attempt, bounded

	ledgerBin string
	ledger    *ledgerRun
	ledgers   []*ledgerRun // every ledger started, for their logs
	ledgerPID atomic.Int64 // of ledger, for the CPU sampler
	nledgers  int

	// workers are the worker processes the agents section runs now; their
	// CPU is measured, not counted as noise.
	workerMu sync.Mutex
	workers  []*ledgerRun
}

// Client timeouts. Queries get one attempt: a read that cannot be answered
// (see the notes on max_payload) must fail the figure, not stall the run.
const (
	appendTimeout = 30 * time.Second
	appendRetry   = 60 * time.Second
	queryTimeout  = 30 * time.Second
)

func run(ctx context.Context, cfg config, out, logw io.Writer) (err error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	h := &harness{cfg: cfg, logw: logw, started: time.Now(), pay: newPayloads(cfg.chunkBytes)}
	h.env = readEnvironment(cfg)
	if h.env.proposal, h.env.stored, err = h.pay.sizes(); err != nil {
		return err
	}
	if h.dir, err = os.MkdirTemp("", "rath-bench-"); err != nil {
		return err
	}
	if cfg.keep {
		h.logf("keeping %s", h.dir)
	} else {
		defer os.RemoveAll(h.dir)
	}
	if err := h.setUp(ctx); err != nil {
		h.tearDown()
		return err
	}
	if cfg.waitQuiet > 0 {
		h.waitQuiet(ctx, cfg.waitQuiet)
	}
	watch := h.watchNoise()
	var failed []error
	for _, s := range cfg.sections {
		if ctx.Err() != nil {
			failed = append(failed, fmt.Errorf("section %s not run: %w", s, ctx.Err()))
			break
		}
		if err := h.section(ctx, s); err != nil {
			h.logf("section %s failed: %v", s, err)
			h.rep.note("section %s failed: %v", s, err)
			failed = append(failed, fmt.Errorf("section %s: %w", s, err))
		}
	}
	h.env.noise = watch.summary()
	if err := h.tearDown(); err != nil {
		failed = append(failed, err)
	}
	h.env.write(out, cfg)
	h.rep.write(out)
	fmt.Fprintf(out, "\nTotal run time %s.\n", time.Since(h.started).Round(time.Second))
	return errors.Join(failed...)
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.logw, "[%7.1fs] %s\n", time.Since(h.started).Seconds(), fmt.Sprintf(format, args...))
}

func (h *harness) setUp(ctx context.Context) error {
	var err error
	// Authenticated and least-privileged as `rath up` is: the raw runs
	// connect as admin (they need a stream of their own), the Rath client
	// as a client, each service as its role.
	if h.creds, err = auth.Ensure(filepath.Join(h.dir, "creds")); err != nil {
		return err
	}
	h.ecfg = embedded.Config{
		Listen: "127.0.0.1:0", StoreDir: filepath.Join(h.dir, "jetstream"),
		SyncAlways: h.cfg.syncAlways, ServerName: "rath-bench", Users: h.creds.Identities(),
	}
	h.ns, err = embedded.Start(h.ecfg)
	if err != nil {
		return err
	}
	url := h.ns.ClientURL()
	h.logf("nats-server %s at %s, store %s", server.VERSION, url, h.dir)
	if h.ncRaw, err = h.connect(auth.RoleAdmin, "rath-bench-raw", false); err != nil {
		return err
	}
	if h.ncCli, err = h.connect(auth.RoleClient, "rath-bench-client", false); err != nil {
		return err
	}
	if h.js, err = jetstream.New(h.ncRaw); err != nil {
		return err
	}
	if h.cli, err = client.New(h.ncCli, client.WithSource(source), client.WithTimeout(appendTimeout), client.WithRetryFor(appendRetry)); err != nil {
		return err
	}
	if h.qcli, err = client.New(h.ncCli, client.WithSource(source), client.WithTimeout(queryTimeout), client.WithRetryFor(0)); err != nil {
		return err
	}
	if h.cfg.profileDir != "" {
		if err := os.MkdirAll(h.cfg.profileDir, 0o755); err != nil {
			return err
		}
	}
	h.ledgerBin = h.cfg.ledgerBin
	if h.ledgerBin == "" && (h.cfg.ledgerProcess || h.cfg.has(sectionMemory)) {
		h.logf("building %s", ledgerPkg)
		if h.ledgerBin, err = buildLedger(ctx, h.dir, h.cfg.profileDir != ""); err != nil {
			return err
		}
	}
	if err := h.startLedger(ctx, h.cfg.ledgerProcess); err != nil {
		return err
	}
	// The ledger created Rath's streams; the harness reads them directly.
	if h.store, err = eventstore.Open(ctx, h.ncRaw, eventstore.DefaultConfig()); err != nil {
		return err
	}
	if h.stream, err = h.js.Stream(ctx, events.StreamSessions); err != nil {
		return err
	}
	return createRawStream(ctx, h.js)
}

// startLedger starts a fresh ledger, in this process or as a process of its
// own, and waits until it answers.
func (h *harness) startLedger(ctx context.Context, ownProcess bool) error {
	h.nledgers++
	name := fmt.Sprintf("bench-ledger-%d", h.nledgers)
	logPath := filepath.Join(h.dir, name+".log")
	var (
		p   *ledgerRun
		err error
	)
	if ownProcess {
		p, err = h.startProcess(h.ledgerBin, h.ns.ClientURL(), name, logPath, h.cfg.profileDir)
	} else {
		p, err = h.startInProcess(name, logPath)
	}
	if err != nil {
		return err
	}
	h.ledger = p
	h.ledgers = append(h.ledgers, p)
	h.ledgerPID.Store(int64(p.pid()))
	if err := p.waitReady(ctx, h.qcli); err != nil {
		_ = p.stop(5 * time.Second)
		return err
	}
	h.logf("ledger %s (%s) ready", name, p.where())
	return nil
}

func (h *harness) tearDown() error {
	var errs []error
	if h.ledger != nil {
		if err := h.ledger.stop(30 * time.Second); err != nil {
			errs = append(errs, fmt.Errorf("stop ledger: %w", err))
		}
	}
	for _, l := range h.ledgers {
		for _, what := range []string{`"level":"ERROR"`, "reply lost", "snapshot skipped"} {
			if n := l.logCount(what); n > 0 {
				h.rep.note("ledger %s logged %d × %s; first: %s", l.name, n, strings.Trim(what, `"`), l.logSummary(what))
			}
		}
	}
	for _, nc := range []*nats.Conn{h.ncCli, h.ncRaw} {
		if nc != nil {
			nc.Close()
		}
	}
	if h.ns != nil {
		h.ns.Shutdown()
		h.ns.WaitForShutdown()
	}
	return errors.Join(errs...)
}

// section runs one section, profiling the harness and the ledger through it
// when asked to.
func (h *harness) section(ctx context.Context, name string) error {
	h.logf("section %s", name)
	stop := h.profile(name)
	var err error
	switch name {
	case sectionAppend:
		err = h.runAppend(ctx)
	case sectionMemory:
		err = h.runMemory(ctx)
	case sectionAgents:
		err = h.runAgents(ctx)
	case sectionRecall:
		err = h.runRecall(ctx)
	case sectionLong:
		err = h.runLong(ctx)
	case sectionGoAPI:
		err = h.runGoAPI(ctx)
	case sectionGateway:
		err = h.runGateway(ctx)
	case sectionPlacement:
		err = h.runPlacement(ctx)
	case sectionRecheck:
		err = h.runRecheck(ctx)
	case sectionEval:
		err = h.runEval(ctx)
	case sectionEngine:
		err = h.runEngine(ctx)
	}
	return errors.Join(err, stop())
}

func (h *harness) profile(name string) func() error {
	if h.cfg.profileDir == "" {
		return func() error { return nil }
	}
	f, err := os.Create(filepath.Join(h.cfg.profileDir, "bench-"+name+".pprof"))
	if err != nil {
		return func() error { return err }
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return func() error { return err }
	}
	stopLedger := func() error { return nil }
	if name != sectionMemory { // the memory section profiles the ledger it starts
		stopLedger = h.ledger.profile(filepath.Join(h.cfg.profileDir, "ledger-"+name+".pprof"))
	}
	return func() error {
		pprof.StopCPUProfile()
		f.Close()
		return stopLedger()
	}
}

// parallel calls fn(i) for i in [0, n) on workers goroutines and returns the
// first error; after an error no new call starts.
func parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		next  = make(chan int)
	)
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return first
}

// connect opens a connection to the bench's server as role, over loopback TCP
// or in-process (as `rath up` connects its services).
func (h *harness) connect(role auth.Role, name string, inProcess bool) (*nats.Conn, error) {
	creds, _, err := auth.Options(h.creds.Path(role))
	if err != nil {
		return nil, err
	}
	opts := append([]nats.Option{nats.Name(name)}, creds...)
	if inProcess {
		opts = append(opts, nats.InProcessServer(h.ns))
	}
	nc, err := nats.Connect(h.ns.ClientURL(), opts...)
	if err != nil {
		return nil, fmt.Errorf("connect %s as %s: %w", name, role, err)
	}
	return nc, nil
}
