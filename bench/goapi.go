package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/agentserver"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/rath"
	"github.com/openrath/rath/pkg/workflowfile"
)

// sectionGoAPI measures the Go Session API (pkg/rath, issue 17 part 3):
// one agent turn forwarded through the API against the same turn through
// the raw client, and a Go agent's turn (pkg/agentserver) against a
// YAML-declared scripted agent's. It is optional: it starts a selector and
// an agent worker of its own.
const sectionGoAPI = "goapi"

// goapiWorkflow is the section's workflow, under bench/testdata.
const goapiWorkflow = "testdata/goapi/goapi.yaml"

// runGoAPI is section G. Each turn is forwarded in a fresh session (its
// start is not timed), one at a time:
//
//   - G1: rath.Agent("scripted").Forward (request, watch until the turn
//     ends) against the raw client doing the same by hand (Emit, Watch);
//   - G2: the same forward of the Go agent "served" (answering what the
//     script answers) against G1's scripted agent.
func (h *harness) runGoAPI(ctx context.Context) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	wfPath := filepath.Join(root, "bench", goapiWorkflow)
	stop, err := h.startGoAPIServices()
	if err != nil {
		return err
	}
	defer stop()
	user, err := h.connect(auth.RoleClient, "rath-bench-goapi", false)
	if err != nil {
		return err
	}
	defer user.Close()
	c, err := client.New(user)
	if err != nil {
		return err
	}
	// The bundle is stored once: every session starts with the same
	// content-addressed reference.
	wf, err := workflowfile.Store(ctx, c, wfPath)
	if err != nil {
		return fmt.Errorf("goapi: %w", err)
	}
	n := h.cfg.n(500, 10)
	forward := func(agent string) func(ctx context.Context, id string) (time.Duration, error) {
		return func(ctx context.Context, id string) (time.Duration, error) {
			s, err := rath.Start(ctx, c, rath.StartOptions{ID: id, Workflow: wf, Task: "bench goapi"})
			if err != nil {
				return 0, err
			}
			began := time.Now()
			_, err = rath.Agent(agent).Forward(ctx, s)
			return time.Since(began), err
		}
	}
	byHand := func(ctx context.Context, id string) (time.Duration, error) {
		s, err := rath.Start(ctx, c, rath.StartOptions{ID: id, Workflow: wf, Task: "bench goapi"})
		if err != nil {
			return 0, err
		}
		began := time.Now()
		err = rawTurn(ctx, c, s.ID())
		return time.Since(began), err
	}
	// A warm-up turn of each: the first bundle fetch, the first context.
	for i, fn := range []func(context.Context, string) (time.Duration, error){forward("scripted"), forward("served"), byHand} {
		if _, err := fn(ctx, fmt.Sprintf("goapi-warm-%d", i)); err != nil {
			return fmt.Errorf("goapi warm-up: %w", err)
		}
	}
	a, err := h.quietly(ctx, "G", func(ctx context.Context, try int) (attempt, error) {
		var a attempt
		h.logf("G: %d turns each way, one at a time", n)
		cpu := h.cpuStart()
		var api, raw, served latencies
		for i := range n {
			for _, m := range []struct {
				into *latencies
				fn   func(context.Context, string) (time.Duration, error)
				name string
			}{{&api, forward("scripted"), "api"}, {&raw, byHand, "raw"}, {&served, forward("served"), "served"}} {
				d, err := m.fn(ctx, fmt.Sprintf("goapi-%d-%s-%d", try, m.name, i))
				if err != nil {
					return a, err
				}
				*m.into = append(*m.into, d)
			}
		}
		a.timed(cpu.stop())
		a.rows = append(a.rows,
			row{id: "G1", what: fmt.Sprintf("Go API: rath.Agent(\"scripted\").Forward, one YAML-declared scripted turn (%d turns)", n),
				rath: api.String(), rawWhat: "the raw client: Emit the turn request, Watch until the turn ends", raw: raw.String(),
				ratio: fmtRatio(latencyRatio(api.median(), raw.median()))},
			row{id: "G2", what: fmt.Sprintf("Go API: the same forward of a Go agent (pkg/agentserver) answering the same (%d turns)", n),
				rath: served.String(), rawWhat: "G1: the YAML-declared scripted agent (agent worker)", raw: api.String(),
				ratio: fmtRatio(latencyRatio(served.median(), api.median()))},
		)
		return a, nil
	})
	if err != nil {
		return err
	}
	h.rep.add(a.rows...)
	return nil
}

// errTurnEnded stops rawTurn's watch.
var errTurnEnded = errors.New("turn ended")

// rawTurn is a forward by hand with the client: request a turn of the
// scripted agent and watch the session until it ends.
func rawTurn(ctx context.Context, c *client.Client, id string) error {
	turnID := "turn-" + events.NewID()[:8]
	ack, err := c.Emit(ctx, id, &events.TurnRequested{TurnID: turnID, Agent: "scripted"})
	if err != nil {
		return err
	}
	err = c.Watch(ctx, id, func(ev events.Stored) error {
		if ev.Type != events.TypeTurnCompleted && ev.Type != events.TypeTurnFailed {
			return nil
		}
		if ev.Type == events.TypeTurnFailed {
			return fmt.Errorf("turn %s of %s failed", turnID, id)
		}
		return errTurnEnded
	}, client.From(ack.Seq+1))
	if errors.Is(err, errTurnEnded) {
		return nil
	}
	return err
}

// startGoAPIServices runs a selector and an agent worker in this process
// (internal/runtime) and serves the Go agent "served" on a connection of
// the agent worker's identity, until the returned stop.
func (h *harness) startGoAPIServices() (func(), error) {
	rt, err := h.startLoopServices("goapi")
	if err != nil {
		return nil, err
	}
	nc, err := h.connect(auth.RoleAgentWorker, "rath-bench-goapi-agent", true)
	if err != nil {
		rt.Stop()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- agentserver.Serve(ctx, nc, "served", agentserver.Func(
			func(context.Context, agentserver.Turn) (agentserver.Answer, error) {
				return agentserver.Answer{Text: "Done.", Usage: agentserver.Usage{TokensIn: 10, TokensOut: 2}}, nil
			}))
	}()
	return func() {
		cancel()
		if err := <-done; err != nil {
			h.rep.note("G: the Go agent's server: %v", err)
		}
		nc.Drain()
		if err := rt.Stop(); err != nil {
			h.rep.note("G: the in-process services: %v", err)
		}
	}, nil
}
