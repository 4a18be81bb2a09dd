package toolserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/internal/evidence"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

type server struct {
	t       Tool
	durable string
	states  States
	rec     *evidence.Recorder
	allow   *allowList
	schema  *jsonschema.Schema
}

// handle runs one requested call of the tool, once: requests of other tools,
// and calls the session's state shows finished, are left alone. A call a
// gate holds runs when its approval is granted (on the request, or on the
// grant when it comes later) and fails with the reason when it is rejected;
// the events answer whichever of the two ran it. A call whose gate nobody
// has decided yet (one the agent worker did not propose) waits for the
// tool runner's decision, which is delivered here too: its clearance runs
// the call, its approval request holds it (ADR 0025, amendment). The
// server never evaluates a workflow's gates itself. A call its caller runs
// (events.RunnerCaller) is left alone: the program that recorded it
// records its outcome.
func (s *server) handle(ctx context.Context, ev events.Stored) error {
	d, err := ev.Decode()
	if err != nil {
		return consume.Permanent(err)
	}
	switch d := d.(type) {
	case *events.ToolRequested:
		if d.Tool != s.t.Name || d.Runner == events.RunnerCaller {
			return nil // another tool's, or one its caller runs: no state read
		}
	case *events.ToolCleared:
		if d.Tool != s.t.Name {
			return nil
		}
	}
	st, err := s.states.StateSince(ctx, ev.Session, ev.Seq)
	if err != nil {
		return err
	}
	var req *events.ToolRequested
	switch d := d.(type) {
	case *events.ToolRequested:
		req = d
	case *events.ToolCleared:
		req = st.Call(d.CallID)
	case *events.ApprovalGranted:
		req = st.GatedCall(d.ApprovalID)
	case *events.ApprovalRejected:
		req = st.GatedCall(d.ApprovalID)
	case *events.ApprovalExpired:
		req = st.GatedCall(d.ApprovalID)
	}
	if req == nil || req.Tool != s.t.Name {
		return nil
	}
	call := st.Tools[req.CallID]
	if st.Status.Ended() || call == nil || call.Status == session.ToolCompleted || call.Status == session.ToolFailed {
		return nil // done already (a redelivery), or nothing to do
	}
	if call.Runner == events.RunnerCaller {
		return nil // requested again for its caller to run
	}
	// The events answer the request (or the approval's decision) with the
	// server's durable name and its client's source, rath/tool/<name>.
	attempt := call.Attempts + 1
	e := s.rec.Attempt(ev, req, attempt)
	switch gate := st.GateOf(req.CallID); {
	case gate.Refused():
		return e.Fail(ctx, gate.Rejection(), 0, nil)
	case gate.Unscreened:
		return nil // waits for the tool runner's decision, which is delivered here too
	case !gate.Runnable():
		return nil // waits for its approval's decision, which is delivered here too
	}
	if why := s.allowed(ctx, st, req); why != "" {
		return e.Fail(ctx, why, 0, nil)
	}
	if err := s.check(req.Arguments); err != nil {
		return e.Fail(ctx, err.Error(), 0, nil)
	}
	if err := e.Start(ctx, nil); err != nil {
		return err
	}
	start := time.Now()
	result, err := s.run(context.WithValue(ctx, callKey{}, Call{Session: ev.Session, CallID: req.CallID, EventID: ev.ID, Agent: req.Agent, Attempt: attempt}), req.Arguments)
	dur := time.Since(start)
	if err != nil && ctx.Err() != nil {
		return err // stopping: the request is delivered again, as a new attempt
	}
	if err != nil {
		return e.Fail(ctx, err.Error(), dur, nil)
	}
	return e.Complete(ctx, &events.ToolCompleted{DurationMS: dur.Milliseconds()}, result, "")
}

// run calls Handle, turning a panic into a failed call.
func (s *server) run(ctx context.Context, args json.RawMessage) (result string, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("tool %s panicked: %v", s.t.Name, p)
		}
	}()
	return s.t.Handle(ctx, args)
}

// allowed checks the tool against the requesting agent's tools in the
// session's workflow, as the tool runner does for its tools, and returns why
// the call is refused ("" if it is not). Sessions without a workflow may use
// every tool.
func (s *server) allowed(ctx context.Context, st *session.State, req *events.ToolRequested) string {
	return s.allow.check(ctx, st, req.Agent, req.Tool)
}

// compile compiles the tool's parameter schema.
func compile(t Tool) (*jsonschema.Schema, error) {
	if t.Parameters == nil {
		return nil, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(t.Parameters))
	if err != nil {
		return nil, fmt.Errorf("tool %s: parameters: %w", t.Name, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	url := "urn:rath:tool:" + t.Name
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("tool %s: parameters: %w", t.Name, err)
	}
	schema, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("tool %s: parameters: %w", t.Name, err)
	}
	return schema, nil
}

// check validates arguments against the tool's schema; absent or null
// arguments stand for the empty object.
func (s *server) check(args json.RawMessage) error {
	var v any = map[string]any{}
	if trimmed := bytes.TrimSpace(args); len(trimmed) > 0 && string(trimmed) != "null" {
		var err error
		if v, err = jsonschema.UnmarshalJSON(bytes.NewReader(trimmed)); err != nil {
			return fmt.Errorf("%s: arguments are not valid JSON: %w", s.t.Name, err)
		}
	}
	if _, isObject := v.(map[string]any); !isObject {
		return fmt.Errorf("%s: arguments must be a JSON object", s.t.Name)
	}
	if s.schema == nil {
		return nil
	}
	err := s.schema.Validate(v)
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		var problems []string
		for _, c := range leaves(ve) {
			at := "/" + strings.Join(c.InstanceLocation, "/")
			problems = append(problems, at+": "+c.ErrorKind.LocalizedString(printer))
		}
		return fmt.Errorf("%s: invalid arguments: %s", s.t.Name, strings.Join(problems, "; "))
	}
	return err
}

var printer = message.NewPrinter(language.English)

// leaves returns the innermost causes of a validation error: the specific
// problems, not the "does not match the schema" above them.
func leaves(ve *jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(ve.Causes) == 0 {
		return []*jsonschema.ValidationError{ve}
	}
	var out []*jsonschema.ValidationError
	for _, c := range ve.Causes {
		out = append(out, leaves(c)...)
	}
	return out
}
