package console

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/openrath/rath/internal/evidence"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// fact is one line of an event's panel: what the record says, named.
type fact struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// Code is set for values shown as code (arguments, IDs, JSON).
	Code bool `json:"code,omitempty"`
	// Seq links the value to an event of the session.
	Seq uint64 `json:"seq,omitempty"`
}

// maxResult bounds a tool result shown in an event's panel.
const maxResult = 16 << 10

// eventFacts says what one event records, by its type: a model call's
// tokens and latency; a tool call's arguments, attempts, exit code, result
// and placement; a routing decision's rule and inputs; a validation; an
// approval. Facts the event does not hold come from the ledger's view of
// the session at the event's sequence (the call's index entry, the
// placement), so the panel never says more than the record.
func eventFacts(ctx context.Context, c *client.Client, ev events.Stored, data any) []fact {
	var fs []fact
	add := func(name, value string) {
		if value != "" {
			fs = append(fs, fact{Name: name, Value: value})
		}
	}
	code := func(name string, v []byte) {
		if len(v) > 0 && string(v) != "null" {
			fs = append(fs, fact{Name: name, Value: string(v), Code: true})
		}
	}
	switch d := data.(type) {
	case *events.ModelCalled:
		add("Agent", d.Agent)
		add("Model", d.Provider+"/"+d.Model)
		add("Tokens", fmt.Sprintf("%d in, %d out", d.TokensIn, d.TokensOut))
		add("Latency", fmt.Sprintf("%d ms", d.LatencyMS))
		if d.Attempt > 1 {
			add("Attempt", strconv.Itoa(d.Attempt))
		}
		add("Stopped", d.StopReason)
	case *events.ToolRequested:
		add("Tool", d.Tool)
		add("Call", d.CallID)
		add("Agent", d.Agent)
		code("Arguments", d.Arguments)
		add("Approval", d.ApprovalID)
		add("Runner", d.Runner)
	case *events.ToolStarted:
		fs = append(fs, callFacts(ctx, c, ev, d.Tool, d.CallID)...)
		add("Attempt", strconv.Itoa(d.Attempt))
		fs = append(fs, sandboxFact(d.Sandbox)...)
	case *events.ToolCompleted:
		fs = append(fs, callFacts(ctx, c, ev, d.Tool, d.CallID)...)
		add("Exit code", strconv.Itoa(d.ExitCode))
		add("Attempt", strconv.Itoa(max(d.Attempt, 1)))
		add("Duration", fmt.Sprintf("%d ms", d.DurationMS))
		fs = append(fs, resultFact(ctx, c, d.Result, d.ResultRef)...)
		if d.CommitBefore != d.CommitAfter {
			add("Commits", short(d.CommitBefore)+" → "+short(d.CommitAfter))
		}
		fs = append(fs, sandboxFact(d.Sandbox)...)
		if d.Correction {
			add("Correction", "a person provided this result")
		}
	case *events.ToolFailed:
		fs = append(fs, callFacts(ctx, c, ev, d.Tool, d.CallID)...)
		add("Error", d.Error)
		add("Exit code", strconv.Itoa(d.ExitCode))
		add("Attempt", strconv.Itoa(max(d.Attempt, 1)))
		fs = append(fs, sandboxFact(d.Sandbox)...)
	case *events.SandboxPlaced:
		add("Backend", d.Backend)
		add("Sandbox", d.SandboxID)
		add("Isolation", d.IsolationOf())
		add("Host", d.Host)
		add("Commit", short(d.Commit))
		add("Reason", d.Reason)
		if d.From != nil {
			add("Moved from", d.From.Backend+" "+d.From.SandboxID)
		}
	case *events.SelectorDecided:
		add("Rule", d.Rule)
		add("Route", d.Route)
		add("Router", d.Router)
		add("Agent", d.Agent)
		add("Reason", d.Reason)
		code("Inputs", d.Inputs)
	case *events.ValidationPassed:
		add("Validator", d.Validator)
		add("Verdict", "passed")
		add("Target", d.Target)
		code("Details", d.Details)
	case *events.ValidationFailed:
		add("Validator", d.Validator)
		add("Verdict", "failed")
		add("Reason", d.Reason)
		add("Target", d.Target)
		code("Details", d.Details)
	case *events.ApprovalRequested:
		add("Approval", d.ApprovalID)
		add("Action", d.Action)
		add("Approver role", d.Approver)
		add("Call", d.CallID)
		add("Gate", d.Gate)
		add("Deadline", d.Deadline)
		add("On timeout", d.OnTimeout)
	case *events.ApprovalGranted:
		add("Approval", d.ApprovalID)
		add("Granted by", ev.Actor)
		add("Comment", d.Comment)
	case *events.ApprovalRejected:
		add("Approval", d.ApprovalID)
		add("Rejected by", ev.Actor)
		add("Reason", d.Reason)
	}
	return fs
}

// callFacts are a tool call's name, arguments and attempts as the ledger's
// index holds them at the event: the request is an earlier event.
func callFacts(ctx context.Context, c *client.Client, ev events.Stored, tool, callID string) []fact {
	fs := []fact{{Name: "Tool", Value: tool}, {Name: "Call", Value: callID}}
	ov, err := c.Overview(ctx, api.StateRequest{Session: ev.Session, At: ev.Seq, Tail: 1, Clip: 1, ToolCalls: []string{callID}})
	if err != nil {
		return append(fs, fact{Name: "Arguments", Value: "not shown: " + err.Error()})
	}
	for _, t := range ov.Tools.Asked {
		if t.CallID != callID {
			continue
		}
		if t.Agent != "" {
			fs = append(fs, fact{Name: "Agent", Value: t.Agent})
		}
		switch {
		case len(t.Arguments) > 0:
			fs = append(fs, fact{Name: "Arguments", Value: indent(t.Arguments), Code: true, Seq: t.Seq})
		case t.ArgumentsSize > 0:
			fs = append(fs, fact{Name: "Arguments", Value: fmt.Sprintf("%d bytes, in the request", t.ArgumentsSize), Seq: t.Seq})
		}
		if t.Attempts > 1 {
			fs = append(fs, fact{Name: "Attempts", Value: strconv.Itoa(t.Attempts) + " so far"})
		}
	}
	return fs
}

// resultFact is a tool's result, read from the blob store when it was too
// long to go inline, cut at maxResult where a character ends.
func resultFact(ctx context.Context, c *client.Client, result, ref string) []fact {
	if result == "" && ref != "" {
		b, err := c.GetBlob(ctx, ref)
		if err != nil {
			return []fact{{Name: "Result", Value: "stored as " + ref + ", not shown: " + err.Error()}}
		}
		result = string(b)
	}
	if result == "" {
		return nil
	}
	if len(result) > maxResult {
		result = evidence.Prefix(result, maxResult) + fmt.Sprintf("\n… (%d bytes in all)", len(result))
	}
	return []fact{{Name: "Result", Value: result, Code: true}}
}

func sandboxFact(s *events.Sandbox) []fact {
	if s == nil {
		return nil
	}
	return []fact{{Name: "Placement", Value: s.Backend + " " + s.SandboxID}}
}

func indent(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return string(raw)
	}
	return string(b)
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}
