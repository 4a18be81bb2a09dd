package rerun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/openrath/rath/internal/replay"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
	worker "github.com/openrath/rath/services/agent-worker/service"
)

// WhatIfOptions configure WhatIf.
type WhatIfOptions struct {
	// From is the last sequence the fork shares with the session; it must
	// be between turns.
	From uint64
	// ID is the fork's session ID ("": the ledger's choice).
	ID string
	// Provider, Model and BaseURL run the fork's agents on another model
	// (labels the agent worker honours); "" keeps the workflow's. The
	// caller checks them.
	Provider, Model, BaseURL string
	// Wait bounds the wait for the fork to close.
	Wait time.Duration
	// Progress receives a line for people once the fork runs (nil: none).
	Progress io.Writer
}

// WhatIfResult is a finished what-if.
type WhatIfResult struct {
	// Fork is the fork made; Last the branch compared: the fork, or the
	// last fork the workflow made of it (a fork superseded by its own).
	Fork, Last string
	// Agent took the fork's first turn.
	Agent string
	// Contrast compares the session with Last.
	Contrast replay.Contrast
}

// NotClosedError is WhatIf's error when the fork did not close within
// WhatIfOptions.Wait (or ctx ended): it can be compared later.
type NotClosedError struct {
	Session, Fork string
	Err           error
}

func (e *NotClosedError) Error() string {
	return fmt.Sprintf("what-if fork %s of %s: not closed (%v)", e.Fork, e.Session, e.Err)
}

func (e *NotClosedError) Unwrap() error { return e.Err }

// TurnFailedError is WhatIf's error when the what-if's own turn failed
// (its endpoint refused, no API key, the model unreachable): the fork is
// closed, outcome failed, and stays in the record under its ID, as every
// session does; another what-if needs another ID.
type TurnFailedError struct {
	Session, Fork, Agent string
	// Reason is the turn's failure as the agent worker recorded it.
	Reason string
}

func (e *TurnFailedError) Error() string {
	return fmt.Sprintf("what-if fork %s: what-if turn of %s failed: %s (the fork is closed, outcome failed)", e.Fork, e.Agent, e.Reason)
}

// errWatched stops a watch once the session closed.
var errWatched = errors.New("closed")

// WhatIf forks the session at o.From in the system c talks to and
// continues the fork live: the agent the original routed next after From
// takes a turn on the fork, on the model o names. It waits for the fork (or
// the last fork the workflow makes of it) to close, then contrasts the
// session with that branch. A From inside a turn, or with no agent's turn
// after it, is an ErrUsage naming the nearest sequences that work.
func WhatIf(ctx context.Context, c *client.Client, sessionID string, o WhatIfOptions) (*WhatIfResult, error) {
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	labels := map[string]string{}
	if o.Provider != "" {
		labels[worker.LabelProvider], labels[worker.LabelModel] = o.Provider, o.Model
		if o.BaseURL != "" {
			labels[worker.LabelBaseURL] = o.BaseURL
		}
	}
	st, err := c.Overview(ctx, api.StateRequest{Session: sessionID, At: o.From})
	if err != nil {
		return nil, err
	}
	tree, err := replay.Read(ctx, c, sessionID)
	if err != nil {
		return nil, err
	}
	if st.Turn != nil || len(st.Tools.Open) > 0 {
		log := tree.Logical(tree.Branch(sessionID))
		where := ""
		if st.Turn != nil {
			end := "its head"
			if after := nextBoundary(log, o.From, false); after != 0 {
				end = fmt.Sprint(after)
			}
			where = fmt.Sprintf("is inside the turn of %s (events %d..%s)", st.Turn.Agent, st.Turn.Seq, end)
		} else {
			t := st.Tools.Open[0]
			where = fmt.Sprintf("has tool call %s still %s", t.CallID, t.Status)
		}
		return nil, usageError{fmt.Errorf("sequence %d of %s %s: fork between turns%s", o.From, sessionID, where, suggestFrom(log, o.From))}
	}
	agent := ""
	for _, e := range tree.Logical(tree.Branch(sessionID)) {
		if e.Seq <= o.From || e.Type != events.TypeSelectorDecided {
			continue
		}
		var d events.SelectorDecided
		if json.Unmarshal(e.Data, &d) == nil && d.Agent != "" {
			agent = d.Agent
			break
		}
	}
	if agent == "" {
		return nil, usageError{fmt.Errorf("no agent turn follows sequence %d in %s: nothing to continue", o.From, sessionID)}
	}
	model := "its workflow's model"
	if o.Provider != "" {
		model = o.Provider + "/" + o.Model
	}
	ack, err := c.Fork(ctx, api.ForkRequest{Parent: sessionID, At: o.From, ID: o.ID, Labels: labels, EventSource: Source,
		Reason: fmt.Sprintf("what-if: %s continues on %s", agent, model)})
	if err != nil {
		return nil, err
	}
	fork := ack.Session
	turnID := "turn-" + events.DerivedID(ack.ID, "what-if")[:8]
	opts := []events.Option{events.WithID(events.DerivedID(ack.ID, "what-if-decided")), events.WithCausation(ack.ID)}
	if _, err := c.Emit(ctx, fork, &events.SelectorDecided{Rule: "what-if", Route: "agent:" + agent, Agent: agent, TurnID: turnID,
		Reason: "rath replay --fork: the agent the original routed after " + fmt.Sprint(o.From)}, opts...); err != nil {
		return nil, err
	}
	opts[0] = events.WithID(events.DerivedID(ack.ID, "what-if-request"))
	if _, err := c.Emit(ctx, fork, &events.TurnRequested{TurnID: turnID, Agent: agent, Rule: "what-if"}, opts...); err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "rath replay: what-if fork %s of %s at %d: %s on %s\n", fork, sessionID, o.From, agent, model)

	last, err := waitClosed(ctx, c, fork, turnID, o.From, o.Wait)
	if err != nil {
		var nc *NotClosedError
		if errors.As(err, &nc) {
			nc.Session = sessionID
		}
		var tf *TurnFailedError
		if errors.As(err, &tf) {
			tf.Session = sessionID
		}
		return nil, err
	}
	d, err := replay.ReadContrast(ctx, c, sessionID, last)
	if err != nil {
		return nil, err
	}
	return &WhatIfResult{Fork: fork, Last: last, Agent: agent, Contrast: d}, nil
}

// waitClosed waits up to wait for the fork to close, following it to the
// last fork the workflow makes of it while each closes superseded, and
// returns the branch that closed otherwise. The what-if's own turn failing
// closes the fork, failed: nothing would run it on.
func waitClosed(ctx context.Context, c *client.Client, fork, turnID string, from uint64, wait time.Duration) (string, error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	last := fork
	for {
		var closed events.SessionClosed
		var failed *events.TurnFailed
		err := c.Watch(wctx, last, func(e events.Stored) error {
			switch e.Type {
			case events.TypeSessionClosed:
				_ = json.Unmarshal(e.Data, &closed)
				return errWatched
			case events.TypeTurnFailed:
				// The what-if's own turn failing (its endpoint refused, no
				// key, the model unreachable) ends it: nothing would run
				// the fork on, and waiting for a close would leave it open
				// for good.
				var f events.TurnFailed
				if json.Unmarshal(e.Data, &f) == nil && f.TurnID == turnID {
					failed = &f
					return errWatched
				}
			}
			return nil
		}, client.From(from+1))
		if failed != nil {
			reason := fmt.Sprintf("what-if turn of %s failed: %s", failed.Agent, failed.Error)
			// The selector may have closed it first (a failed turn no rule
			// routes closes its session): closed either way.
			if _, cerr := c.Close(ctx, last, events.SessionClosed{Outcome: "failed", Reason: reason}); cerr != nil && !errors.Is(cerr, api.ErrClosed) {
				return "", fmt.Errorf("what-if fork %s: %s; closing it: %w", last, reason, cerr)
			}
			return "", &TurnFailedError{Fork: last, Agent: failed.Agent, Reason: failed.Error}
		}
		if !errors.Is(err, errWatched) {
			return "", &NotClosedError{Fork: last, Err: err}
		}
		if closed.Outcome != "superseded" {
			return last, nil
		}
		g, err := c.Lineage(ctx, last)
		if err != nil {
			return "", err
		}
		next := newestChild(g.Root, last)
		if next == "" {
			return last, nil
		}
		last = next
	}
}

// betweenTurns reports whether st is between turns: no turn in flight and
// no tool call open, where a what-if can fork.
func betweenTurns(st *session.State) bool {
	if st.Turn != nil {
		return false
	}
	for _, t := range st.Tools {
		if t.Open() {
			return false
		}
	}
	return true
}

// nextBoundary is the first sequence after from (the last before it when
// before is set) of a session's logical log at which the session is between
// turns and an agent's turn follows, or 0. Merged events are not folded
// in: they move neither turns nor tool calls of the session.
func nextBoundary(log []events.Stored, from uint64, before bool) uint64 {
	st := &session.State{}
	var found []uint64 // boundaries so far, waiting for an agent's turn
	best := uint64(0)
	for _, e := range log {
		if e.Type == events.TypeSelectorDecided {
			var d events.SelectorDecided
			if json.Unmarshal(e.Data, &d) == nil && d.Agent != "" {
				for _, b := range found {
					if before && b < from {
						best = b
					} else if !before && b > from {
						return b
					}
				}
				found = found[:0]
			}
		}
		session.Apply(st, e)
		if betweenTurns(st) {
			found = append(found, e.Seq)
		}
	}
	return best
}

// suggestFrom names the nearest sequences around from that a what-if can
// fork at.
func suggestFrom(log []events.Stored, from uint64) string {
	var opts []string
	for _, b := range []uint64{nextBoundary(log, from, true), nextBoundary(log, from, false)} {
		if b != 0 {
			opts = append(opts, fmt.Sprintf("--from %d", b))
		}
	}
	if len(opts) == 0 {
		return ""
	}
	return ": use " + strings.Join(opts, " or ")
}

// newestChild is the last fork of session id in a lineage graph.
func newestChild(n *api.Node, id string) string {
	if n == nil {
		return ""
	}
	if n.Session == id {
		if len(n.Children) == 0 {
			return ""
		}
		return n.Children[len(n.Children)-1].Session
	}
	for _, c := range n.Children {
		if s := newestChild(c, id); s != "" {
			return s
		}
	}
	return ""
}
