package telemetry_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/telemetry"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
)

func data(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// What a stored event records becomes metrics: tokens and latency of model
// calls, tool calls by sandbox backend and outcome, turns and their
// duration from the turn's opening, recalls.
func TestStoredEventsBecomeMetrics(t *testing.T) {
	at := time.Date(2026, 1, 5, 9, 0, 10, 0, time.UTC)
	telemetry.Stored(events.TypeModelCalled, at, data(t, events.ModelCalled{Provider: "p-test", Model: "m-test", TokensIn: 120, TokensOut: 30, LatencyMS: 250}), time.Time{})
	telemetry.Stored(events.TypeToolCompleted, at, data(t, events.ToolCompleted{DurationMS: 40, Sandbox: &events.Sandbox{Backend: "bwrap-test"}}), time.Time{})
	telemetry.Stored(events.TypeToolFailed, at, data(t, events.ToolFailed{DurationMS: 5, Sandbox: &events.Sandbox{Backend: "bwrap-test"}}), time.Time{})
	telemetry.Stored(events.TypeTurnCompleted, at, data(t, events.TurnCompleted{Agent: "a-test"}), at.Add(-3*time.Second))
	telemetry.Stored(events.TypeMemoryRecalled, at, data(t, events.MemoryRecalled{Query: "q"}), time.Time{})

	want := map[string]string{
		`rath_model_tokens_total{direction="in",model="m-test",provider="p-test"}`:        "120",
		`rath_model_tokens_total{direction="out",model="m-test",provider="p-test"}`:       "30",
		`rath_model_call_duration_seconds_sum{model="m-test",provider="p-test"}`:          "0.25",
		`rath_tool_call_duration_seconds_count{backend="bwrap-test",outcome="completed"}`: "1",
		`rath_tool_call_duration_seconds_count{backend="bwrap-test",outcome="failed"}`:    "1",
		`rath_turns_total{agent="a-test",outcome="completed"}`:                            "1",
		`rath_turn_duration_seconds_sum{agent="a-test"}`:                                  "3",
		`rath_ledger_appends_total{type="rath.model.called"}`:                             "",
		`rath_memory_recalls_total{found="false"}`:                                        "",
	}
	got := scrape(t, prometheus.DefaultGatherer)
	for series, v := range want {
		line := series + " " + v
		if !strings.Contains(got, line) {
			t.Errorf("no %q in\n%s", line, grep(got, strings.SplitN(series, "{", 2)[0]))
		}
	}
}

func scrape(t *testing.T, g prometheus.Gatherer) string {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(g, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

func grep(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The endpoint serves /metrics with the consumers' backlog, /healthz, and
// /readyz: ready while NATS is connected, 503 naming why once it is not.
func TestEndpoint(t *testing.T) {
	ns, _ := natstest.Start(t)
	nc := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleLedger)
	srv, err := telemetry.Serve("127.0.0.1:0", nc, []string{"selector"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close(context.Background())
	base := "http://" + srv.Addr()
	if code, _ := fetch(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
	if code, body := fetch(t, base+"/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Errorf("/readyz while connected: %d %q", code, body)
	}
	if code, body := fetch(t, base+"/metrics"); code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics: %d", code)
	}
	nc.Close()
	if code, body := fetch(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "NATS connection CLOSED") {
		t.Errorf("/readyz after NATS went away: %d %q", code, body)
	}
}

func fetch(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}
