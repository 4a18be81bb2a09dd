package client

import (
	"context"
	"fmt"

	"github.com/openrath/rath/pkg/agentapi"
)

// Agents is the client of the agent worker's API for served agents
// (rath.agent.*, pkg/agentapi). Only the identity served programs run
// with, the agent worker's, is answered. Requests are retried on transient
// failures; a record asked again with the same answer is recorded once.
type Agents struct{ c *Client }

// Agents returns the agent worker's client on the same connection.
func (c *Client) Agents() *Agents { return &Agents{c: c} }

// Turn returns what the workflow says of a pending turn's agent.
func (a *Agents) Turn(ctx context.Context, t agentapi.Turn) (agentapi.TurnReply, error) {
	var r agentapi.TurnReply
	if err := a.c.request(ctx, a.c.as.Agent(agentapi.ReqTurn), t, &r); err != nil {
		return r, fmt.Errorf("turn %s of agent %s in session %s: %w", t.TurnID, t.Agent, t.Session, err)
	}
	return r, nil
}

// Record hands the worker a turn's answer (or failure) to record.
func (a *Agents) Record(ctx context.Context, req agentapi.RecordRequest) (agentapi.RecordReply, error) {
	var r agentapi.RecordReply
	if err := a.c.request(ctx, a.c.as.Agent(agentapi.ReqRecord), req, &r); err != nil {
		return r, fmt.Errorf("record turn %s of agent %s in session %s: %w", req.TurnID, req.Agent, req.Session, err)
	}
	return r, nil
}
