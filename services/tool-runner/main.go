// Command tool-runner runs the tool calls of Rath sessions in sandboxes (a
// git workspace per session on this host) and records their evidence.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/daemon"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/services/tool-runner/service"
)

func main() {
	cfg := service.DefaultConfig()
	flag.StringVar(&cfg.Sandbox.Root, "workspaces", filepath.Join(".rath", "workspaces"), "directory of the per-session workspaces (bwrap's under its .bwrap)")
	flag.StringVar(&cfg.Backend, "sandbox", cfg.Backend, "sandbox backend of sessions whose workflow names none: auto (bwrap where it works, else local with a warning), bwrap, gvisor, remote (with --remote-sandbox) or local")
	flag.Var(&cfg.Sandbox.Net.Allow, "sandbox-allow-net", "addresses, ranges and names (comma-separated: 127.0.0.1:8080,10.0.0.0/8,db.internal:5432) that workflows' network lists may name beyond public destinations; loopback, private, link-local and metadata addresses are refused otherwise")
	flag.StringVar(&cfg.Pool, "pool", events.PoolDefault, "the pool of tool runners this one serves: sessions moved to POOL/BACKEND (rath to) are taken by a runner of POOL, with its backends")
	flag.BoolVar(&cfg.AllowLocal, "sandbox-allow-local", false, "let workflows and move requests put sessions on the local backend (no isolation) while the default isolates")
	flag.Int64Var(&cfg.States.MaxBytes, "state-cache-bytes", cfg.States.MaxBytes, "approximate bytes of folded session states kept in memory")
	flag.DurationVar(&cfg.Sandbox.Limits.Timeout, "timeout", cfg.Sandbox.Limits.Timeout, "default wall-clock limit of a command")
	flag.Int64Var(&cfg.Sandbox.Limits.Memory, "memory", cfg.Sandbox.Limits.Memory, "address-space limit of a command in bytes (0: none)")
	flag.Int64Var(&cfg.Sandbox.Limits.CallMemory, "call-memory", cfg.Sandbox.Limits.CallMemory, "memory limit of a call's processes together in bytes, in a control group of the call's own (0: none)")
	flag.Int64Var(&cfg.Sandbox.Limits.CallProcesses, "call-processes", cfg.Sandbox.Limits.CallProcesses, "process limit of a call, all its processes at once, in its control group (0: none)")
	flag.DurationVar(&cfg.Sandbox.Limits.CallCPU, "call-cpu", cfg.Sandbox.Limits.CallCPU, "CPU-time limit of a call's processes together, in its control group (0: none)")
	flag.BoolVar(&cfg.Sandbox.NoCgroup, "no-cgroup", false, "run commands without a control group of the call's own: only each process's limits hold")
	flag.StringVar(&cfg.Remote.URL, "remote-sandbox", "", "base URL of a remote sandbox service speaking OpenSandbox's API (https, or http on loopback), which enables the remote backend; its API key is read from "+service.RemoteKeyEnv)
	flag.StringVar(&cfg.Remote.Image, "remote-sandbox-image", "", "container image of the remote backend's sandboxes")
	flag.DurationVar(&cfg.Remote.TTL, "remote-sandbox-ttl", cfg.Remote.TTL, "time to live of a remote sandbox, after which the service deletes it")
	passEnv := flag.String("pass-env", strings.Join(service.PassEnvDefault, ","), "environment variables passed to sandboxed commands")
	daemon.Main("tool-runner", auth.RoleToolRunner, func(ctx context.Context, nc *nats.Conn, log *slog.Logger) error {
		return service.Run(ctx, nc, cfg, log)
	}, func() error { // after the flags are parsed
		cfg.Sandbox.Path = os.Getenv("PATH")
		cfg.Sandbox.Env = service.SandboxEnv(strings.Split(*passEnv, ","), os.Getenv)
		cfg.Remote.Key = os.Getenv(service.RemoteKeyEnv)
		return cfg.Validate()
	})
}
