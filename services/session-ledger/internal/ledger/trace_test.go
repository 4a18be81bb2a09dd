package ledger_test

import (
	"bytes"
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/openrath/rath/internal/tracing"
	"github.com/openrath/rath/pkg/client"
)

// A producer's trace continues through the ledger: the ledger's append span
// is its child, the stored event names the producer's trace, and the stored
// message carries the ledger span for consumers.
func TestTraceContextPropagates(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	r := newRig(t)
	ctx, producer := tp.Tracer("test").Start(context.Background(), "producer")
	r.start(t, "traced")
	a2, err := r.c.Emit(ctx, "traced", chunk("traced step"))
	producer.End()
	if err != nil {
		t.Fatal(err)
	}

	var appendSpan sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "rath.ledger.append" && s.Parent().TraceID() == producer.SpanContext().TraceID() {
			appendSpan = s
		}
	}
	if appendSpan == nil || appendSpan.Parent().SpanID() != producer.SpanContext().SpanID() {
		t.Fatalf("no ledger span under the producer's span (%d spans)", len(rec.Ended()))
	}
	m, err := r.store.Get(context.Background(), a2.StreamSeq)
	if err != nil {
		t.Fatal(err)
	}
	stored := tracing.Extract(context.Background(), m.Header)
	if sc := trace.SpanContextFromContext(stored); sc.SpanID() != appendSpan.SpanContext().SpanID() {
		t.Fatalf("stored message header names span %s, want the ledger's %s", sc.SpanID(), appendSpan.SpanContext().SpanID())
	}
	log, _ := r.c.Log(context.Background(), "traced", client.Range{From: a2.Seq, To: a2.Seq})
	if want := tracing.Traceparent(ctx); log[0].Raw == nil || !containsTraceparent(log[0].Raw, want) {
		t.Fatalf("stored event lacks the producer's traceparent %s: %s", want, log[0].Raw)
	}
}

func containsTraceparent(raw []byte, tp string) bool {
	return tp != "" && bytes.Contains(raw, []byte(`"traceparent":"`+tp+`"`))
}
