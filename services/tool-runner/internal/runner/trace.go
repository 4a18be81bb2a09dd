package runner

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/openrath/rath/internal/tracing"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
	"github.com/openrath/rath/services/tool-runner/internal/tools"
)

// execute runs a call in an "execute_tool <tool>" span of the OpenTelemetry
// GenAI semantic conventions, with the call's ID, its sandbox and the
// session's event.
func (r *Runner) execute(ctx context.Context, rt route, st *session.State, ws sandbox.Workspace, ev events.Stored, req *events.ToolRequested, sb *events.Sandbox) (tools.Output, error) {
	ctx, span := tracing.Tracer("tool-runner").Start(ctx, "execute_tool "+req.Tool, trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", req.Tool),
		attribute.String("gen_ai.tool.call.id", req.CallID),
		attribute.String("rath.sandbox.backend", sb.Backend), attribute.String("rath.sandbox.id", sb.SandboxID),
		attribute.String("rath.session", ev.Session), attribute.Int64("rath.seq", int64(ev.Seq)),
	))
	defer span.End()
	out, err := r.run(ctx, rt, st, ws, req)
	switch {
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	case out.ExitCode != 0:
		span.SetStatus(codes.Error, "exit code "+strconv.Itoa(out.ExitCode))
	}
	span.SetAttributes(attribute.Int("rath.tool.exit_code", out.ExitCode))
	return out, err
}
