package e2e_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// otlpSpan is a span an OTLP receiver got, with its service's name.
type otlpSpan struct {
	service, name, trace string
	attrs                map[string]*commonpb.AnyValue
}

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes the protobuf
// the services' exporters send.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []otlpSpan
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var in coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &in)
		}
		if err != nil || req.URL.Path != "/v1/traces" {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range in.ResourceSpans {
			service := ""
			for _, kv := range rs.Resource.GetAttributes() {
				if kv.Key == "service.name" {
					service = kv.Value.GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					sp := otlpSpan{service: service, name: s.Name, trace: string(s.TraceId), attrs: map[string]*commonpb.AnyValue{}}
					for _, kv := range s.Attributes {
						sp.attrs[kv.Key] = kv.Value
					}
					r.spans = append(r.spans, sp)
				}
			}
		}
		r.mu.Unlock()
		b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(b)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *otlpReceiver) all() []otlpSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// One trace follows a session across processes (issue 14 item 1): the
// ledger, the selector, the agent worker and the tool runner each run as
// their own process exporting over OTLP to a receiver in the test, and the
// session's spans (the appends, each handler's handling, the model calls
// with the GenAI attributes, the tool execution) share one trace ID.
func TestOneTraceAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four service processes; skipped with -short")
	}
	recv := startOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100") // ms: export as the session runs
	r := startScaleRig(t, 1)
	start := r.uploadWorkflow(t, "scale.yaml")
	ids := []string{"traced"}
	r.startSessions(t, start, ids)
	r.mustClose(t, ids, time.Minute)
	r.stop(t) // SIGTERM: each process flushes its spans before it exits

	var traces = map[string]int{}
	for _, s := range recv.all() {
		if v, ok := s.attrs["rath.session"]; ok && v.GetStringValue() == "traced" {
			traces[s.trace]++
		}
	}
	if len(traces) != 1 {
		t.Fatalf("the session's spans are in %d traces, want 1: %v", len(traces), traces)
	}
	var id string
	for id = range traces {
	}
	services, names := map[string]bool{}, []string{}
	var chat, tool *otlpSpan
	for _, s := range recv.all() {
		if s.trace != id {
			continue
		}
		services[s.service] = true
		names = append(names, s.service+": "+s.name)
		switch {
		case strings.HasPrefix(s.name, "chat "):
			chat = &s
		case strings.HasPrefix(s.name, "execute_tool "):
			tool = &s
		}
	}
	for _, want := range []string{"rath-session-ledger", "rath-selector", "rath-agent-worker", "rath-tool-runner"} {
		if !services[want] {
			t.Errorf("no span of %s in the session's trace; it has %s", want, strings.Join(names, ", "))
		}
	}
	if chat == nil || chat.attrs["gen_ai.operation.name"].GetStringValue() != "chat" || chat.attrs["gen_ai.request.model"].GetStringValue() != "scripted-1" ||
		chat.attrs["gen_ai.provider.name"].GetStringValue() != "scripted" || chat.attrs["gen_ai.usage.input_tokens"] == nil {
		t.Errorf("model call span: %+v", chat)
	}
	if tool == nil || tool.attrs["gen_ai.tool.name"].GetStringValue() != "run" || tool.attrs["gen_ai.tool.call.id"].GetStringValue() == "" {
		t.Errorf("tool span: %+v", tool)
	}
	if t.Failed() {
		t.Logf("spans of the trace: %s", strings.Join(names, "\n"))
	}
}
