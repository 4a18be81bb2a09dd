package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	toolrunner "github.com/openrath/rath/services/tool-runner/service"
)

// sectionPlacement is the placement section (optional): issue 34's S1 and
// S2.
const sectionPlacement = "placement"

// runPlacement measures S1, a `run echo` call on each sandbox backend that
// works here, side by side (requested → completed, and this process's CPU
// per call: the runner and the commands it waited for), and S2, a move of
// a 50 MB workspace between two tool runners of different pools (each in
// this process, with a workspaces root and a host name of its own, as on
// two hosts): requested → placed.
func (h *harness) runPlacement(ctx context.Context) error {
	// The remote backend's service: the tests' (OpenSandbox's API on
	// bwrap), as its own process on loopback.
	remoteURL, stopRemote, err := h.startSandboxService(ctx)
	if err != nil {
		return err
	}
	defer stopRemote()
	runner := func(ctx context.Context, pool, host string) (func() error, error) {
		nc, err := h.connect(auth.RoleToolRunner, "tool-runner-"+pool, true)
		if err != nil {
			return nil, err
		}
		cfg := toolrunner.DefaultConfig()
		cfg.Pool, cfg.AllowLocal = pool, true
		cfg.Sandbox.Root = filepath.Join(h.dir, "placement-"+pool)
		cfg.Sandbox.Path, cfg.Sandbox.Host = os.Getenv("PATH"), host
		cfg.MCP.Scratch = filepath.Join(h.dir, "placement-mcp-"+pool)
		cfg.Remote.URL, cfg.Remote.Key, cfg.Remote.Image = remoteURL, sandboxServiceKey, "rath-bench"
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- toolrunner.Run(ctx, nc, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
		return sync.OnceValue(func() error {
			cancel()
			err := <-done
			nc.Close()
			return err
		}), nil
	}
	stopA, err := runner(ctx, events.PoolDefault, "bench-a")
	if err != nil {
		return err
	}
	defer stopA()
	stopB, err := runner(ctx, "gpu", "bench-b")
	if err != nil {
		return err
	}
	defer stopB()
	c := h.cli

	// call requests a tool call and returns the time to its completion.
	call := func(ctx context.Context, id, callID, args string) (time.Duration, *events.ToolCompleted, error) {
		start := time.Now()
		ack, err := c.Emit(ctx, id, &events.ToolRequested{CallID: callID, Tool: "run", Arguments: []byte(args)})
		if err != nil {
			return 0, nil, err
		}
		var done *events.ToolCompleted
		err = h.awaitEvent(ctx, id, ack.Seq, func(d any) (bool, error) {
			switch d := d.(type) {
			case *events.ToolCompleted:
				if d.CallID == callID {
					done = d
					return true, nil
				}
			case *events.ToolFailed:
				if d.CallID == callID {
					return false, fmt.Errorf("call %s failed: %s", callID, d.Error)
				}
			}
			return false, nil
		})
		return time.Since(start), done, err
	}
	// move asks for a move and returns the time to its placement.
	move := func(ctx context.Context, id, pool, backend string) (time.Duration, error) {
		start := time.Now()
		ack, err := c.Emit(ctx, id, &events.SandboxRequested{Backend: backend, Pool: pool})
		if err != nil {
			return 0, err
		}
		err = h.awaitEvent(ctx, id, ack.Seq, func(d any) (bool, error) {
			switch d := d.(type) {
			case *events.SandboxPlaced:
				return true, nil
			case *events.SandboxRefused:
				return false, fmt.Errorf("move of %s to %s/%s refused: %s", id, pool, backend, d.Reason)
			}
			return false, nil
		})
		return time.Since(start), err
	}

	// S1: each backend, one session each, placed by a move before its
	// first call.
	n := h.cfg.n(200, 20)
	a, err := h.quietly(ctx, "S1", func(ctx context.Context, try int) (attempt, error) {
		var a attempt
		for _, backend := range events.Backends() {
			id := fmt.Sprintf("s1-%s-%d", backend, try)
			if _, err := c.Start(ctx, id, events.SessionStarted{}); err != nil {
				return a, err
			}
			if _, err := move(ctx, id, "", backend); err != nil {
				a.rows = append(a.rows, row{id: "S1", what: "a `run echo` call on " + backend, rath: "does not work here: " + err.Error()})
				continue
			}
			if _, _, err := call(ctx, id, "warm", `{"command":["echo","hi"]}`); err != nil {
				return a, err
			}
			h.logf("S1: %d run echo calls on %s", n, backend)
			cpu := h.cpuStart()
			var l latencies
			for i := range n {
				d, _, err := call(ctx, id, fmt.Sprintf("e%d", i), `{"command":["echo","hi"]}`)
				if err != nil {
					return a, err
				}
				l = append(l, d)
			}
			u := a.timed(cpu.stop())
			a.rows = append(a.rows, row{id: "S1", what: fmt.Sprintf("a `run echo` call on %s, requested → completed (%d calls)", backend, n),
				rath: l.String(), rawWhat: "CPU per call, this process (the runner and its commands) + the ledger",
				raw: fmtDur((u.self + u.ledger) / time.Duration(n))})
		}
		return a, nil
	})
	if err != nil {
		return err
	}
	h.rep.add(a.rows...)

	// S2: a session whose workspace holds 50 MB (500 files of 100 KB of
	// random bytes: nothing compresses), moved between the pools; a small
	// change before each move, so that each carries a new bundle.
	moves := h.cfg.n(10, 4)
	a, err = h.quietly(ctx, "S2", func(ctx context.Context, try int) (attempt, error) {
		var a attempt
		id := fmt.Sprintf("s2-%d", try)
		if _, err := c.Start(ctx, id, events.SessionStarted{}); err != nil {
			return a, err
		}
		if _, err := move(ctx, id, events.PoolDefault, events.BackendLocal); err != nil {
			return a, err
		}
		if _, _, err := call(ctx, id, "fill", `{"command":["sh","-c","for i in $(seq 500); do head -c 102400 /dev/urandom > f$i.bin; done; du -sk ."]}`); err != nil {
			return a, err
		}
		h.logf("S2: %d moves of a 50 MB workspace between two pools", moves)
		var l latencies
		cpu := h.cpuStart()
		for i := range moves {
			if _, _, err := call(ctx, id, fmt.Sprintf("touch%d", i), fmt.Sprintf(`{"command":["sh","-c","echo %d > counter"]}`, i)); err != nil {
				return a, err
			}
			pool := "gpu"
			if i%2 == 1 {
				pool = events.PoolDefault
			}
			d, err := move(ctx, id, pool, events.BackendLocal)
			if err != nil {
				return a, err
			}
			l = append(l, d)
		}
		a.timed(cpu.stop())
		a.rows = append(a.rows, row{id: "S2", what: fmt.Sprintf("moving a 50 MB workspace between runners of two pools (a bundle through the object store; %d moves)", moves),
			rath: l.String(), target: "p50 ≤ 2 s: " + verdict(l.median() <= 2*time.Second)})
		return a, nil
	})
	if err != nil {
		return err
	}
	h.rep.add(a.rows...)
	return errors.Join(stopB(), stopA())
}

// sandboxServiceKey is the bench's key of its remote sandbox service.
const sandboxServiceKey = "bench-sandbox-key"

// startSandboxService builds and starts the tests' remote sandbox service
// (services/tool-runner/internal/sandbox/sandboxtest/serve) and returns its
// URL and the function that stops it.
func (h *harness) startSandboxService(ctx context.Context) (string, func(), error) {
	root, err := moduleRoot()
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(h.dir, "sandbox-service")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./services/tool-runner/internal/sandbox/sandboxtest/serve")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("build the sandbox service: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, filepath.Join(h.dir, "sandbox-service-root"))
	cmd.Env = append(os.Environ(), "RATH_REMOTE_SANDBOX_KEY="+sandboxServiceKey)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	logf, err := os.Create(filepath.Join(h.dir, "sandbox-service.log"))
	if err != nil {
		return "", nil, err
	}
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return "", nil, fmt.Errorf("start the sandbox service: %w", err)
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		logf.Close()
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("the sandbox service said no URL (%v): see %s", err, logf.Name())
	}
	return strings.TrimSpace(line), stop, nil
}

// awaitEvent watches session id from seq until match says an event is the
// one awaited (or fails).
func (h *harness) awaitEvent(ctx context.Context, id string, seq uint64, match func(d any) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	found := errors.New("found")
	err := h.cli.Watch(ctx, id, func(ev events.Stored) error {
		d, err := ev.Decode()
		if err != nil {
			return err
		}
		ok, err := match(d)
		if ok {
			return found
		}
		return err
	}, client.From(seq+1))
	if errors.Is(err, found) {
		return nil
	}
	return fmt.Errorf("session %s: %w", id, err)
}
