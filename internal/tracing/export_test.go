package tracing

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Spans go to an OTLP/HTTP receiver named by the standard variables, with
// the service name from OTEL_SERVICE_NAME; the receiver here is a real one
// in the test, decoding the protobuf the exporter sends.
func TestSetupExportsOverOTLP(t *testing.T) {
	got := make(chan *coltracepb.ExportTraceServiceRequest, 4)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil || r.URL.Path != "/v1/traces" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got <- &req
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		_, _ = w.Write(b)
	}))
	defer recv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_SERVICE_NAME", "rath-test")
	ctx := context.Background()
	shutdown, err := Setup(ctx, "default-name")
	if err != nil {
		t.Fatal(err)
	}
	_, span := Tracer("test").Start(ctx, "rath.test.span")
	span.End()
	if err := shutdown(ctx); err != nil { // flushes
		t.Fatal(err)
	}
	req := <-got
	var names []string
	service := ""
	for _, rs := range req.ResourceSpans {
		for _, kv := range rs.Resource.Attributes {
			if kv.Key == "service.name" {
				service = kv.Value.GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				names = append(names, s.Name)
			}
		}
	}
	if service != "rath-test" || len(names) != 1 || names[0] != "rath.test.span" {
		t.Fatalf("exported service %q, spans %v", service, names)
	}
}

// Without an endpoint, or with the exporter or the SDK switched off,
// nothing is exported; an unknown protocol is refused by name.
func TestSetupExportsNothingUnlessAsked(t *testing.T) {
	for _, env := range []map[string]string{
		{},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_EXPORTER": "none"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true"},
	} {
		if exporting(func(k string) string { return env[k] }) {
			t.Errorf("%v: exporting", env)
		}
	}
	if !exporting(func(k string) string { return map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x"}[k] }) {
		t.Error("a traces endpoint alone does not export")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	if _, err := Setup(context.Background(), "x"); err == nil {
		t.Error("http/json accepted")
	}
}

// traceService is an OTLP/gRPC trace receiver.
type traceService struct {
	coltracepb.UnimplementedTraceServiceServer
	got chan *coltracepb.ExportTraceServiceRequest
}

func (s *traceService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.got <- req
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// The same over OTLP/gRPC (OTEL_EXPORTER_OTLP_PROTOCOL=grpc), to a gRPC
// receiver in the test.
func TestSetupExportsOverOTLPgRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svc := &traceService{got: make(chan *coltracepb.ExportTraceServiceRequest, 4)}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, svc)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	ctx := context.Background()
	shutdown, err := Setup(ctx, "rath-grpc-test")
	if err != nil {
		t.Fatal(err)
	}
	_, span := Tracer("test").Start(ctx, "rath.test.grpc")
	span.End()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	req := <-svc.got
	if n := len(req.ResourceSpans); n != 1 || req.ResourceSpans[0].ScopeSpans[0].Spans[0].Name != "rath.test.grpc" {
		t.Fatalf("exported %v", req)
	}
}
