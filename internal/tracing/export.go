package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

// Setup installs an OpenTelemetry SDK tracer provider that exports spans
// over OTLP, configured by the standard environment variables, and returns
// what flushes and stops it. Nothing is installed (and shutdown does
// nothing) unless OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, or when OTEL_TRACES_EXPORTER is
// "none" or OTEL_SDK_DISABLED is "true".
//
//   - OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL: http/protobuf (the default) or grpc;
//   - OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, _HEADERS, _TIMEOUT, _INSECURE: read
//     by the exporters;
//   - OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES: the resource (service.name
//     defaults to service);
//   - OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG: read by the SDK
//     (default: parent-based, always on).
func Setup(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	none := func(context.Context) error { return nil }
	if !exporting(os.Getenv) {
		return none, nil
	}
	var exp sdktrace.SpanExporter
	switch p := protocol(os.Getenv); p {
	case "http/protobuf", "":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return none, fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_PROTOCOL %q: want http/protobuf or grpc", p)
	}
	if err != nil {
		return none, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(service)))
	if err == nil {
		// The environment's service name and attributes win over the default.
		var env *resource.Resource
		if env, err = resource.New(ctx, resource.WithFromEnv()); err == nil {
			res, err = resource.Merge(res, env)
		}
	}
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return none, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagator)
	return tp.Shutdown, nil
}

// exporting reports whether the environment asks for traces to be exported.
func exporting(env func(string) string) bool {
	if strings.EqualFold(env("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(env("OTEL_TRACES_EXPORTER"), "none") {
		return false
	}
	return env("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

func protocol(env func(string) string) string {
	if p := env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"); p != "" {
		return p
	}
	return env("OTEL_EXPORTER_OTLP_PROTOCOL")
}
