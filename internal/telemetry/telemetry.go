// Package telemetry is Rath's Prometheus metrics and health endpoints.
//
// Most metrics are read off the evidence: the ledger counts every event it
// stores and every proposal it refuses, and takes the model calls' tokens
// and latency, the tool calls' duration and sandbox, the turns' outcomes and
// the memory recalls from the events that record them, so what the metrics
// say is what the log says, whichever process did the work. The durable
// consumers' backlog and the dead letters are read from JetStream when
// /metrics is scraped. Metrics live in the default registry: in `rath up`
// every service shares one /metrics.
package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/openrath/rath/internal/jsonscan"
	"github.com/openrath/rath/pkg/events"
)

var (
	appends = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rath_ledger_appends_total",
		Help: "Events the ledger stored, by event type.",
	}, []string{"type"})
	rejects = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rath_ledger_rejects_total",
		Help: "Proposals the ledger refused and recorded on RATH_REJECTS, by error code.",
	}, []string{"code"})
	requests = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rath_requests_total",
		Help: "Requests the ledger and the memory service answered, by service, operation and outcome (ok or the error code).",
	}, []string{"service", "op", "outcome"})
	requestSeconds = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rath_request_duration_seconds",
		Help:    "Time to answer a request, by service and operation.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18),
	}, []string{"service", "op"})
	modelTokens = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rath_model_tokens_total",
		Help: "Model tokens recorded in rath.model.called events, by provider, model and direction (in, out).",
	}, []string{"provider", "model", "direction"})
	modelSeconds = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rath_model_call_duration_seconds",
		Help:    "Model call latency recorded in rath.model.called events, by provider and model.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14), // 10 ms .. 82 s
	}, []string{"provider", "model"})
	turns = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rath_turns_total",
		Help: "Agent turns ended, by agent and outcome (completed, failed).",
	}, []string{"agent", "outcome"})
	turnSeconds = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rath_turn_duration_seconds",
		Help:    "Time from a turn's request to its end, by the stored events' times, by agent.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
	}, []string{"agent"})
	toolSeconds = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rath_tool_call_duration_seconds",
		Help:    "Tool call duration recorded in rath.tool.call.completed/failed events, by sandbox backend and outcome: its count is the sandbox calls.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 18), // 1 ms .. 131 s
	}, []string{"backend", "outcome"})
	recalls = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rath_memory_recalls_total",
		Help: "Memory recalls recorded in rath.memory.recalled events, by whether they returned any item.",
	}, []string{"found"})
)

// Stored counts one event the ledger stored, and what its data records.
// turnStart is when the turn an event ends was requested (zero if unknown).
// It decodes the data of the few types it reads more of; the others cost a
// counter.
func Stored(typ string, at time.Time, data []byte, turnStart time.Time) {
	appends.WithLabelValues(typ).Inc()
	switch typ {
	case events.TypeModelCalled:
		var d events.ModelCalled
		if json.Unmarshal(data, &d) == nil {
			modelTokens.WithLabelValues(d.Provider, d.Model, "in").Add(float64(d.TokensIn))
			modelTokens.WithLabelValues(d.Provider, d.Model, "out").Add(float64(d.TokensOut))
			modelSeconds.WithLabelValues(d.Provider, d.Model).Observe(float64(d.LatencyMS) / 1e3)
		}
	case events.TypeTurnCompleted, events.TypeTurnFailed:
		var d struct {
			Agent string `json:"agent"`
		}
		_ = json.Unmarshal(data, &d)
		outcome := "completed"
		if typ == events.TypeTurnFailed {
			outcome = "failed"
		}
		turns.WithLabelValues(d.Agent, outcome).Inc()
		if !turnStart.IsZero() && !at.Before(turnStart) {
			turnSeconds.WithLabelValues(d.Agent).Observe(at.Sub(turnStart).Seconds())
		}
	case events.TypeToolCompleted, events.TypeToolFailed:
		var d struct {
			DurationMS int64           `json:"duration_ms"`
			Sandbox    *events.Sandbox `json:"sandbox"`
		}
		jsonscan.DecodeMembers(data, &d, "duration_ms", "sandbox")
		backend, outcome := "none", "completed"
		if d.Sandbox != nil {
			backend = d.Sandbox.Backend
		}
		if typ == events.TypeToolFailed {
			outcome = "failed"
		}
		toolSeconds.WithLabelValues(backend, outcome).Observe(float64(d.DurationMS) / 1e3)
	case events.TypeMemoryRecalled:
		var d struct {
			Items []json.RawMessage `json:"items"`
		}
		_ = json.Unmarshal(data, &d)
		recalls.WithLabelValues(fmt.Sprint(len(d.Items) > 0)).Inc()
	}
}

// Refused counts one proposal the ledger refused, by its error code.
func Refused(code string) { rejects.WithLabelValues(code).Inc() }

// Request counts one answered request and observes its time.
func Request(service, op, outcome string, d time.Duration) {
	requests.WithLabelValues(service, op, outcome).Inc()
	requestSeconds.WithLabelValues(service, op).Observe(d.Seconds())
}

// streams is the JetStream state /metrics reads when scraped: the durable
// consumers' backlog on RATH_SESSIONS and the dead letters.
type streams struct {
	js        jetstream.JetStream
	durables  []string
	pending   *prometheus.Desc
	ackWait   *prometheus.Desc
	redeliver *prometheus.Desc
	dead      *prometheus.Desc
}

// Collector reads the named durable consumers' backlog and the dead
// letters from JetStream at each scrape (the connection needs read access:
// a service's role or admin).
func Collector(nc *nats.Conn, durables []string) (prometheus.Collector, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	return &streams{
		js: js, durables: durables,
		pending:   prometheus.NewDesc("rath_consumer_pending", "Events of RATH_SESSIONS the durable consumer has not delivered yet.", []string{"consumer"}, nil),
		ackWait:   prometheus.NewDesc("rath_consumer_ack_pending", "Events delivered to the durable consumer and not acknowledged yet.", []string{"consumer"}, nil),
		redeliver: prometheus.NewDesc("rath_consumer_redelivered", "Events the durable consumer delivered more than once and not acknowledged yet.", []string{"consumer"}, nil),
		dead:      prometheus.NewDesc("rath_dead_letters", "Events handlers gave up on, kept on RATH_DEAD.", nil, nil),
	}, nil
}

func (s *streams) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.pending
	ch <- s.ackWait
	ch <- s.redeliver
	ch <- s.dead
}

func (s *streams) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, d := range s.durables {
		c, err := s.js.Consumer(ctx, events.StreamSessions, d)
		if err != nil {
			continue // not started (or not readable): no series
		}
		info := c.CachedInfo()
		ch <- prometheus.MustNewConstMetric(s.pending, prometheus.GaugeValue, float64(info.NumPending), d)
		ch <- prometheus.MustNewConstMetric(s.ackWait, prometheus.GaugeValue, float64(info.NumAckPending), d)
		ch <- prometheus.MustNewConstMetric(s.redeliver, prometheus.GaugeValue, float64(info.NumRedelivered), d)
	}
	if st, err := s.js.Stream(ctx, events.StreamDead); err == nil {
		ch <- prometheus.MustNewConstMetric(s.dead, prometheus.GaugeValue, float64(st.CachedInfo().State.Msgs))
	}
}

// Server is the HTTP endpoint of one process: /metrics, /healthz (the
// process answers) and /readyz (every readiness check passes; 503 with the
// reasons otherwise).
type Server struct {
	srv *http.Server
	ln  net.Listener
	mux *http.ServeMux
}

// Mount serves h on every path the endpoint does not (rath up's console).
func (s *Server) Mount(h http.Handler) { s.mux.Handle("/", h) }

// Check is a readiness check: nil when ready.
type Check func() error

// NATS is ready while the connection is connected.
func NATS(nc *nats.Conn) Check {
	return func() error {
		if s := nc.Status(); s != nats.CONNECTED {
			return fmt.Errorf("NATS connection %s", s)
		}
		return nil
	}
}

// Listen starts the endpoint on addr ("127.0.0.1:0" picks a port).
func Listen(addr string, reg prometheus.Gatherer, log *slog.Logger, ready ...Check) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("telemetry: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		var errs []error
		for _, c := range ready {
			if err := c(); err != nil {
				errs = append(errs, err)
			}
		}
		if err := errors.Join(errs...); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	s := &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln: ln, mux: mux}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("telemetry endpoint stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return s, nil
}

// Addr is where the endpoint listens.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the endpoint.
func (s *Server) Close(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Serve is the endpoint of a process on addr: the metrics of the default
// registry, the named durable consumers' backlog and the dead letters (read
// through nc, which needs read access to the streams), ready while nc is
// connected.
func Serve(addr string, nc *nats.Conn, durables []string, log *slog.Logger) (*Server, error) {
	col, err := Collector(nc, durables)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(col); err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	return Listen(addr, prometheus.Gatherers{prometheus.DefaultGatherer, reg}, log, NATS(nc))
}
