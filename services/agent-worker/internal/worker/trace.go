package worker

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/openrath/rath/internal/tracing"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/services/agent-worker/internal/provider"
)

// complete calls the model in a span of the OpenTelemetry GenAI semantic
// conventions ("chat <model>": operation, provider, request and response
// model, tokens, finish reason), with the session and the turn's event.
func complete(ctx context.Context, p provider.Provider, agent workflow.Agent, ev events.Stored, req provider.Request) (provider.Response, error) {
	ctx, span := tracing.Tracer("agent-worker").Start(ctx, "chat "+agent.Model, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("gen_ai.operation.name", "chat"),
			attribute.String("gen_ai.provider.name", agent.Provider),
			attribute.String("gen_ai.request.model", agent.Model),
			attribute.String("gen_ai.agent.name", agent.Name),
			attribute.String("rath.session", ev.Session), attribute.Int64("rath.seq", int64(ev.Seq)),
		))
	defer span.End()
	resp, err := p.Complete(ctx, req)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return resp, err
	}
	span.SetAttributes(
		attribute.String("gen_ai.response.model", resp.Model),
		attribute.Int64("gen_ai.usage.input_tokens", resp.TokensIn),
		attribute.Int64("gen_ai.usage.output_tokens", resp.TokensOut),
		attribute.StringSlice("gen_ai.response.finish_reasons", []string{resp.StopReason}),
	)
	return resp, nil
}
