package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/dossier"
	"github.com/openrath/rath/internal/replay"
	"github.com/openrath/rath/internal/rerun"
	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/internal/testsuite"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/natstest"
)

// The example end to end against a whole Rath (as rath up runs it): the
// program serves the Go planner and the Go router, runs the session to its
// close, and the session's dossier (rath export) shows the turns of both
// agents, the planner's write of PLAN.md, the reviewer's read of it, and
// the router's hand-overs.
func TestGoAgentExample(t *testing.T) {
	ns, _ := natstest.Start(t)
	url := ns.ClientURL()
	cfg := testsuite.Config(t, url)
	rt := testsuite.Start(t, ns, cfg, runtime.WithClient("test"))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	prog := config{URL: url, Creds: cfg.CredsDir, Workflow: "workflow.yaml", ID: "go-agent", Task: "add a --verbose flag"}
	if err := run(ctx, prog, &out, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"planner: I will write the plan down.",
		"planner: The plan is in PLAN.md; over to the reviewer.",
		"reviewer: Let me read the plan.",
		"reviewer: The plan has numbered steps and a check at the end. Approved.",
		"tool     write_file by planner: completed",
		"tool     read_file by reviewer: completed",
		"closed   go-agent at",
		"succeeded (the reviewer approved the plan)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, out.String())
		}
	}

	c, err := client.New(rt.Conn)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dossier.Build(ctx, c, "go-agent", dossier.Options{})
	if err != nil {
		t.Fatal(err)
	}
	turns := map[string]int{}
	for _, turn := range d.Turns {
		if turn.Status != dossier.TurnCompleted {
			t.Errorf("turn %+v", turn)
		}
		turns[turn.Agent]++
	}
	if turns["planner"] != 2 || turns["reviewer"] != 2 {
		t.Fatalf("dossier turns by agent %v, want 2 of the planner and 2 of the reviewer", turns)
	}
	var routed []string
	for _, dec := range d.Decisions {
		if dec.Router != "" {
			routed = append(routed, dec.Route+" by "+dec.Router)
		}
	}
	if strings.Join(routed, ", ") != "agent:reviewer by handover, close:succeeded by handover" {
		t.Fatalf("decisions of the router: %v", routed)
	}
	md := dossier.Markdown(d)
	for _, want := range []string{"planner", "reviewer", "PLAN.md"} {
		if !strings.Contains(md, want) {
			t.Errorf("dossier.md does not mention %s", want)
		}
	}

	// rath replay cannot run the Go planner and router in its private
	// runtime: it says so at once rather than wait for a turn nobody
	// answers.
	orig, err := replay.Read(ctx, c, "go-agent")
	if err != nil {
		t.Fatal(err)
	}
	_, err = rerun.Reexecute(ctx, c, orig, rerun.Options{Runtime: runtime.DefaultConfig()})
	if !errors.Is(err, rerun.ErrUsage) || !strings.Contains(err.Error(), "programs serve (agent planner") {
		t.Fatalf("replay of a session with a served agent: %v, want a usage error naming the planner", err)
	}
}
