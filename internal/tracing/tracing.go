// Package tracing carries W3C trace context across NATS with OpenTelemetry.
// There is no official OTel instrumentation for nats.go; this is the small
// carrier it needs. NATS header keys are case-sensitive, so the carrier does
// not canonicalise them the way propagation.HeaderCarrier does.
package tracing

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Header adapts a NATS header to OTel's TextMapCarrier.
type Header nats.Header

// Get returns the first value of key.
func (h Header) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces the values of key.
func (h Header) Set(key, value string) { h[key] = []string{value} }

// Keys lists the header keys.
func (h Header) Keys() []string {
	out := make([]string, 0, len(h))
	for k := range h {
		out = append(out, k)
	}
	return out
}

// propagator is W3C trace context: the traceparent header and CloudEvents
// extension use the same format.
var propagator = propagation.TraceContext{}

// Inject writes the trace context of ctx into a NATS header.
func Inject(ctx context.Context, h nats.Header) { propagator.Inject(ctx, Header(h)) }

// Extract returns ctx with the remote span context found in a NATS header.
func Extract(ctx context.Context, h nats.Header) context.Context {
	return propagator.Extract(ctx, Header(h))
}

// FromTraceparent returns ctx with the remote span context of a W3C
// traceparent value (a CloudEvent's traceparent extension).
func FromTraceparent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// Traceparent renders the span context of ctx as a W3C traceparent ("" if
// ctx carries none).
func Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"]
}

// Tracer returns the tracer of a Rath component from the global provider
// (a no-op until a program installs an SDK provider).
func Tracer(component string) trace.Tracer {
	return otel.GetTracerProvider().Tracer("github.com/openrath/rath/" + component)
}
