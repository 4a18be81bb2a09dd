package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

// sectionCluster runs the process-cluster test (e2e/cluster,
// TestClusterProcessesLoseNothing: three nats-server processes, two ledgers
// and the agent loop, the sessions stream's leader killed with SIGKILL and,
// as a second case, stopped with SIGSTOP) at the full scale (issue
// 14 item 4: at least 5,000 appends over 100 sessions, plus agent
// sessions; CI runs it scaled down) and reports each case: what the checker
// found and how long appends stalled. It is a test, not a timing against
// raw JetStream: a figure here is the evidence of one run. Not in the
// default sections (it starts servers of its own and takes a few minutes):
// run it with --sections cluster.
const sectionCluster = "cluster"

// The lines the test logs that the section reads.
var (
	clusterStall   = regexp.MustCompile(`appends stalled (\S+) after the leader's loss .* the slowest append in flight at or after the loss took (\S+),`)
	clusterCheck   = regexp.MustCompile(`(\d+) sessions, (\d+) acks, (\d+) events read back: (\d+) lost, (\d+) duplicates, (\d+) chains not verified`)
	clusterAgents  = regexp.MustCompile(`(\d+) agent sessions closed \(outcomes (.*)\), the last (\S+) after the appends ended`)
	clusterCaseRun = regexp.MustCompile(`^TestClusterProcessesLoseNothing/(.+)$`)
)

// clusterCase is what one case of the test logged.
type clusterCase struct {
	name                  string
	passed, done          bool
	stall, slowest        string
	sessions, acks, read  string
	lost, dups, unchecked string
	agents                string
}

func (h *harness) runCluster(ctx context.Context) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	events := max(300, int(5000*h.cfg.scale))
	sessions := max(20, int(100*h.cfg.scale))
	agents := max(2, int(20*h.cfg.scale))
	args := []string{"test", "-json", "-count=1", "-timeout", "30m", "-run", "^TestClusterProcessesLoseNothing$", "./e2e/cluster",
		fmt.Sprintf("-cluster.proc.events=%d", events), fmt.Sprintf("-cluster.proc.sessions=%d", sessions), fmt.Sprintf("-cluster.agents=%d", agents)}
	h.logf("cluster: go %s", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	cases, order := map[string]*clusterCase{}, []string(nil)
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev struct{ Action, Test, Output string }
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		m := clusterCaseRun.FindStringSubmatch(ev.Test)
		if m == nil {
			continue
		}
		c := cases[m[1]]
		if c == nil {
			c = &clusterCase{name: m[1]}
			cases[m[1]] = c
			order = append(order, m[1])
		}
		switch ev.Action {
		case "pass", "fail":
			c.done, c.passed = true, ev.Action == "pass"
			h.logf("cluster: %s %sed", c.name, ev.Action)
		case "output":
			if s := clusterStall.FindStringSubmatch(ev.Output); s != nil {
				c.stall, c.slowest = s[1], s[2]
			}
			if s := clusterCheck.FindStringSubmatch(ev.Output); s != nil {
				c.sessions, c.acks, c.read, c.lost, c.dups, c.unchecked = s[1], s[2], s[3], s[4], s[5], s[6]
			}
			if s := clusterAgents.FindStringSubmatch(ev.Output); s != nil {
				c.agents = fmt.Sprintf("%s agent sessions closed (%s), the last %s after the appends", s[1], s[2], s[3])
			}
		}
	}
	waitErr := cmd.Wait()
	h.logf("cluster: the test ran %s", time.Since(start).Round(time.Second))
	if len(order) == 0 {
		return fmt.Errorf("cluster: the test ran no case (%v): %s", waitErr, strings.TrimSpace(stderr.String()))
	}
	for i, name := range order {
		c := cases[name]
		met := c.passed && c.lost == "0" && c.dups == "0" && c.unchecked == "0"
		found := fmt.Sprintf("%s acks over %s sessions, %s events read back: %s lost, %s duplicated, %s chains not verified; %s",
			c.acks, c.sessions, c.read, c.lost, c.dups, c.unchecked, c.agents)
		if !c.done {
			found = "did not finish: " + found
		}
		h.rep.add(row{
			id:      fmt.Sprintf("C%d", i+1),
			what:    fmt.Sprintf("3-node cluster as processes, R3, two ledgers and the agent loop: %s of the sessions stream's leader mid-run (%d appends, %d sessions, %d agent sessions)", name, events, sessions, agents),
			rath:    found,
			rawWhat: "appends stalled after the loss (the longest gap between acks); the slowest append across it",
			raw:     fmt.Sprintf("%s; %s", c.stall, c.slowest),
			ratio:   "—",
			target:  fmt.Sprintf("0 lost, 0 duplicated, every chain verified, every agent session closed: %s", verdict(met)),
		})
	}
	if waitErr != nil {
		return fmt.Errorf("cluster: the test failed (%v); its cases are in the report", waitErr)
	}
	return nil
}
