package runner

import (
	"context"
	"errors"
	"time"

	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
)

// ServersHandler is the consume handler that registers the tools of a
// session's MCP servers when the session starts, so that agents are offered
// them, and stops the session's server processes, and deletes its remote
// sandbox, when it closes.
//
// Registration races the session's first turn: an agent worker that finds a
// declared MCP tool not registered yet leaves the turn to be redelivered
// rather than run it without the tool. A workflow's tools are registered
// once this runner has seen one session of the workflow start.
func (r *Runner) ServersHandler() consume.Handler {
	return consume.Handler{
		Name: DurableMCP, Tokens: []string{events.TokenLifecycle},
		Types:  []string{events.TypeSessionStarted, events.TypeSessionClosed},
		Handle: r.HandleLifecycle, Workers: 4, AckWait: time.Minute,
	}
}

// HandleLifecycle handles one session start or close. Registering is
// idempotent: every start of a workflow's session puts the same entries.
func (r *Runner) HandleLifecycle(ctx context.Context, ev events.Stored) error {
	d, err := ev.Decode()
	if err != nil {
		return consume.Permanent(err)
	}
	switch d := d.(type) {
	case *events.SessionClosed:
		r.servers.CloseSession(ev.Session)
		r.discard(ctx, ev.Session)
		return nil
	case *events.SessionStarted:
		return r.registerServers(ctx, d.WorkflowRef)
	}
	return nil
}

// registerServers registers the tools of every MCP server of a workflow as
// "<server>.<tool>", served by the runner. A server that cannot be listed
// does not keep the others' tools from being registered.
func (r *Runner) registerServers(ctx context.Context, ref string) error {
	if ref == "" {
		return nil
	}
	wf, err := r.workflows.Get(ctx, ref)
	if errors.Is(err, eventstore.ErrNotFound) {
		return consume.Permanent(err)
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range wf.Workflow.MCPServers {
		list, err := r.servers.Tools(ctx, wf.Workflow.Hash(), s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, t := range list {
			spec := eventstore.ToolSpec{Name: s.Name + "." + t.Name, Description: t.Description, Parameters: t.InputSchema, Server: Durable}
			if err := r.store.PutTool(ctx, spec); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// discard deletes the remote sandbox a closed session had on this runner,
// if any. A failure is logged, not retried: the service deletes the
// sandbox when its time to live ends.
func (r *Runner) discard(ctx context.Context, session string) {
	for _, b := range r.backends.all() {
		if err := b.Discard(ctx, session); err != nil {
			r.log.Warn("remote sandbox of a closed session not deleted; the service deletes it when it expires", "session", session, "error", err)
		}
	}
}
