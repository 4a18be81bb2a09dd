package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Sections of the benchmark, in the order they run.
const (
	sectionAppend = "append"
	sectionMemory = "memory"
	sectionAgents = "agents"
	sectionRecall = "recall"
	sectionLong   = "long"
)

// The agents section runs first: its workers' durable consumers start at the
// beginning of the sessions stream, which the other sections fill with
// millions of events (100k sessions in the memory section alone) that a
// fresh selector would first have to route past.
var allSections = []string{sectionAgents, sectionLong, sectionAppend, sectionMemory, sectionRecall}

// optionalSections run only when --sections names them (after the others).
var optionalSections = []string{sectionGoAPI, sectionRecheck, sectionEval, sectionEngine, sectionGateway, sectionPlacement}

// config is the whole configuration of one run.
type config struct {
	// scale multiplies every event and session count (1: full scale).
	scale float64
	// syncAlways runs the server with SyncAlways (fsync before every ack).
	syncAlways bool
	// chunkBytes is the content length of each chunk event.
	chunkBytes int
	// sessions is how many sessions the batched appends (1d) spread over.
	sessions int
	// batch is the events per AppendBatch request, batchInflight the requests
	// in flight at once (each from its own share of the sessions).
	batch, batchInflight int
	// figures, if set, limits the run to these figures of the sections (for
	// profiling one of them).
	figures  []string
	sections []string
	// ledgerProcess runs the ledger as its own process for every section,
	// not only for the memory section.
	ledgerProcess bool
	// ledgerBin is a prebuilt session-ledger binary ("" builds one).
	ledgerBin string
	// profileDir, if set, receives CPU profiles of this process and of the
	// ledger (built with a profiling hook) per section, and of the worker
	// processes of 5b's first row (5b-<kind>.pprof, built with the same hook).
	profileDir string
	// timeout bounds the whole run.
	timeout time.Duration
	// keep keeps the temporary directory (store, ledger logs) after the run.
	keep bool
	// tries bounds how often a figure disturbed by other processes is
	// measured again (see quiet.go).
	tries int
	// waitQuiet is how long to wait, at most, for other processes to leave
	// the CPUs alone before measuring.
	waitQuiet time.Duration
}

func parseFlags(args []string) (config, error) {
	c := config{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	quick := fs.Bool("quick", false, "run everything at 1/10 scale (a smoke run of about a minute)")
	fs.Float64Var(&c.scale, "scale", 0, "multiply every count by this factor (0 < scale <= 1; overrides --quick)")
	fs.BoolVar(&c.syncAlways, "sync-always", false, "run the embedded server with SyncAlways (fsync every write before the ack)")
	fs.IntVar(&c.chunkBytes, "chunk-bytes", 64, "content length of each chunk event")
	fs.IntVar(&c.sessions, "sessions", 256, "sessions the batched appends (1d) spread over")
	figures := fs.String("figures", "", "comma-separated figures to measure within the sections, e.g. 1d (default: all)")
	fs.IntVar(&c.batch, "batch", 256, "events per batch request in the batched appends")
	fs.IntVar(&c.batchInflight, "batch-inflight", 4, "batch requests in flight at once, each for its own share of the sessions")
	sectionsFlag := fs.String("sections", strings.Join(allSections, ","), "comma-separated sections to run: "+strings.Join(allSections, ",")+"; also "+strings.Join(optionalSections, ",")+" (goapi: one agent turn forwarded through the Go Session API against the raw client, and a Go agent's turn against a YAML-declared scripted one; recheck: E2, rath recheck of 50 recorded 30-turn sessions whose change affects only the last agent, against running them from the start; eval: E1, rath eval of 20 scripted tasks × 5 runs at concurrency 8 against the same sessions started directly, and its report rendered; engine: ADR 0038's O3, O5, O6 against `rath up` built from this tree as its own process: its VmRSS fresh and with 1,000 active sessions, client.State of a 500- and a 5,000-event session, CPU per 16 KB tool result appended and the runtime's CPU to read that log back; gateway: issue 33's A1 and A2, the latency the model gateway adds to a call against a local provider, streamed and not, and a call answered from the record at sessions of 10 and 1,000 calls; placement: issue 34's S1 and S2, a run echo call on each sandbox backend, and a 50 MB workspace moved between tool runners of two pools)")
	fs.BoolVar(&c.ledgerProcess, "ledger-process", false, "run the ledger as its own process in every section (default: in this process, except for the memory section)")
	fs.StringVar(&c.ledgerBin, "ledger-bin", "", "prebuilt session-ledger binary (default: go build ./services/session-ledger)")
	fs.StringVar(&c.profileDir, "profile", "", "directory for CPU profiles of the harness and of the ledger per section, and of 5b's worker processes at 1 of each kind")
	fs.DurationVar(&c.timeout, "timeout", 0, "bound on the whole run (default 40m, 5m with --quick)")
	fs.BoolVar(&c.keep, "keep", false, "keep the temporary directory (JetStream store, ledger logs)")
	fs.IntVar(&c.tries, "tries", 3, "measure a figure disturbed by other processes up to this many times (1 with --quick unless set)")
	fs.DurationVar(&c.waitQuiet, "wait-quiet", 0, "before measuring, wait up to this long for 5 s in which other processes use under 0.2 cores")
	var usage strings.Builder
	fs.SetOutput(&usage)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.PrintDefaults()
		}
		return config{}, fmt.Errorf("%w\n%s", err, usage.String())
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.scale == 0 {
		c.scale = 1
		if *quick {
			c.scale = 0.1
		}
	}
	if *quick {
		set := false
		fs.Visit(func(f *flag.Flag) { set = set || f.Name == "tries" })
		if !set {
			c.tries = 1
		}
	}
	if c.timeout == 0 {
		c.timeout = time.Duration(math.Max(5, 40*c.scale)) * time.Minute
	}
	if *figures != "" {
		c.figures = strings.Split(*figures, ",")
	}
	for _, s := range strings.Split(*sectionsFlag, ",") {
		if s = strings.TrimSpace(s); s != "" {
			c.sections = append(c.sections, s)
		}
	}
	// Sections run in allSections' order, whatever order the flag names.
	order := append(slices.Clone(allSections), optionalSections...)
	slices.SortStableFunc(c.sections, func(a, b string) int {
		return slices.Index(order, a) - slices.Index(order, b)
	})
	return c, c.validate()
}

func (c config) validate() error {
	var errs []error
	if c.scale <= 0 || c.scale > 1 {
		errs = append(errs, fmt.Errorf("scale must be in (0, 1], got %g", c.scale))
	}
	if c.chunkBytes < 1 || c.chunkBytes > 64<<10 {
		errs = append(errs, fmt.Errorf("chunk-bytes must be 1..65536, got %d", c.chunkBytes))
	}
	if c.batch < 1 || c.batch > api.MaxBatch {
		errs = append(errs, fmt.Errorf("batch must be 1..%d, got %d", api.MaxBatch, c.batch))
	}
	if c.batchInflight < 1 || c.batchInflight > c.sessions {
		errs = append(errs, fmt.Errorf("batch-inflight must be 1..sessions (%d), got %d", c.sessions, c.batchInflight))
	}
	if c.sessions < 1 || c.sessions > 4096 {
		errs = append(errs, fmt.Errorf("sessions must be 1..4096, got %d", c.sessions))
	}
	if len(c.sections) == 0 {
		errs = append(errs, errors.New("no section selected"))
	}
	for _, s := range c.sections {
		if !slices.Contains(allSections, s) && !slices.Contains(optionalSections, s) {
			errs = append(errs, fmt.Errorf("unknown section %q (want %s, or %s)", s, strings.Join(allSections, ","), strings.Join(optionalSections, ",")))
		}
	}
	if c.tries < 1 || c.tries > 10 {
		errs = append(errs, fmt.Errorf("tries must be 1..10, got %d", c.tries))
	}
	if c.waitQuiet < 0 || c.waitQuiet > time.Hour {
		errs = append(errs, errors.New("wait-quiet must be 0..1h"))
	}
	if c.timeout <= 0 {
		errs = append(errs, errors.New("timeout must be positive"))
	}
	return errors.Join(errs...)
}

func (c config) has(section string) bool { return slices.Contains(c.sections, section) }

// n scales a full-scale count, never below floor.
func (c config) n(full, floor int) int {
	return max(int(math.Round(float64(full)*c.scale)), floor)
}

// Sizes of each measurement at the configured scale.
func (c config) pipeAppends() int { return c.n(100_000, 1_000) }
func (c config) memSessions() int { return c.n(100_000, 500) }

// Sizes of the agents section: sessions run one at a time for the hop
// latencies, raw round trips beside them, and sessions per process count
// for the completion rate.
func (c config) agentSessions() int { return c.n(50, 10) }
func (c config) rawRoundTrips() int { return c.n(500, 100) }
func (c config) agentRate() int     { return c.n(200, 40) }
