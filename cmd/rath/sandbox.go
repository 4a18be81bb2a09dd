package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/internal/runtime"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	toolrunner "github.com/openrath/rath/services/tool-runner/service"
)

// printSandboxes says which sandbox backends work on this machine and why
// not, and which one sessions get when their workflow names none. A
// development default is a warning, said once: the line that names the
// default is the warning, and the backend that does not work has said why
// on its own line (s.Warning, which repeats it, is for the tool runner's
// log, where it stands alone).
func printSandboxes(w io.Writer, prefix string, s toolrunner.Sandboxes) {
	for _, b := range s.Backends {
		switch {
		case !b.Works:
			fmt.Fprintf(w, "%s: sandbox backend %s does not work here: %s\n", prefix, b.Name, b.Why)
		case b.Development:
			fmt.Fprintf(w, "%s: sandbox backend %s works (development only: no isolation)\n", prefix, b.Name)
		default:
			fmt.Fprintf(w, "%s: sandbox backend %s works (%s)\n", prefix, b.Name, b.Program)
		}
	}
	switch {
	case s.Default != "" && s.Warning != "" && events.Development(s.Default):
		fmt.Fprintf(w, "%s: WARNING: sessions whose workflow names no sandbox are placed on %s (--sandbox %s), a development backend with no isolation: their commands run as the runner's user on this host\n",
			prefix, s.Default, s.Asked)
	case s.Default != "":
		fmt.Fprintf(w, "%s: sessions whose workflow names no sandbox are placed on %s (--sandbox %s)\n", prefix, s.Default, s.Asked)
		if s.Warning != "" {
			fmt.Fprintf(w, "%s: WARNING: %s\n", prefix, s.Warning)
		}
	case s.Warning != "":
		fmt.Fprintf(w, "%s: WARNING: %s\n", prefix, s.Warning)
	}
}

// sandboxFlag defines --sandbox, the tool runner's default backend.
func sandboxFlag(cmd *cobra.Command, backend *string) {
	cmd.Flags().StringVar(backend, "sandbox", *backend, "sandbox backend of sessions whose workflow names none: "+toolrunner.BackendAuto+
		" (bwrap where it works here, else local with a warning), "+strings.Join(events.Backends(), " or "))
}

// remoteFlags defines the flags of the remote sandbox backend (rath up,
// rath doctor); its key is read from RATH_REMOTE_SANDBOX_KEY, never a flag.
func remoteFlags(cmd *cobra.Command, cfg *toolrunner.Config) {
	f, r := cmd.Flags(), &cfg.Remote
	f.StringVar(&r.URL, "remote-sandbox", r.URL, "base URL of a remote sandbox service speaking OpenSandbox's API (https, or http on loopback), which enables the remote backend; its API key is read from "+toolrunner.RemoteKeyEnv)
	f.StringVar(&r.Image, "remote-sandbox-image", r.Image, "container image of the remote backend's sandboxes")
	f.DurationVar(&r.TTL, "remote-sandbox-ttl", r.TTL, "time to live of a remote sandbox, after which the service deletes it (the next command makes a new one from the workspace)")
}

func (a *app) doctorCmd() *cobra.Command {
	cfg := runtime.DefaultConfig().ToolRunner
	cfg.Sandbox.Root = ""
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check this machine's sandbox backends and the NATS deployment Rath runs on",
		Long: `doctor sets up the tool runner's sandbox backends as "rath up" would and
starts a sandbox with each: bwrap (bubblewrap: is it installed, and can it
start a sandbox here? its own error if not, such as user namespaces being
off), gvisor (gVisor's runsc: is it installed, is the runner root, and can
it start a sandbox here? runsc's own error if not) remote when --remote-sandbox names a service (does it answer,
and accept the key in RATH_REMOTE_SANDBOX_KEY?) and local (development
only: no isolation). It prints what each
isolates and which backend sessions get when their workflow names none
(--sandbox; auto is bwrap where it works, else local with a warning).

The sandboxes are set up in a temporary directory unless --workspaces names
the root to check.

Then it checks the NATS deployment at --nats: the server's version and
max_payload, JetStream, every stream and bucket the ledger and the memory
service create (retention and limits that would delete evidence, atomic
publish, republish, file storage, dedupe window, replicas against each other
and the cluster), the services' durable consumers and their backlog, who the
connection is and which role's permissions it has, this host's clock against
the server's, and the active sessions whose turn waits for a tool nobody
offers. Each problem is printed with how to fix it. It connects
with --creds, or with the admin.nk of rath up's data directory (here or in
a parent directory) when nothing names one (a client may not read the
streams).

Exit status 0 if the default backend works and the deployment answers with
no failure; 6 if no NATS answers (start rath up, or name it with --nats), 8 if
it refuses the credentials (the message says where rath up keeps its own), 1
if the default backend does not work or the deployment has a failure.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Sandbox.Root == "" {
				dir, err := os.MkdirTemp("", "rath-doctor-")
				if err != nil {
					return fmt.Errorf("doctor: %w", err)
				}
				defer os.RemoveAll(dir)
				cfg.Sandbox.Root = dir
			}
			s, err := toolrunner.CheckSandboxes(cmd.Context(), cfg)
			if err != nil {
				return usageError{err}
			}
			bus := a.checkBus(cmd)
			if a.json {
				if err := a.printJSON(doctorReport{Sandboxes: s, NATS: bus}); err != nil {
					return err
				}
			} else {
				writeDoctor(a.Stdout, s)
				writeBus(a.Stdout, bus)
			}
			if err := s.Err(); err != nil {
				return err
			}
			return bus.err()
		},
	}
	cmd.Flags().StringVar(&cfg.Sandbox.Root, "workspaces", "", "the workspace root to check (default: a temporary directory)")
	sandboxFlag(cmd, &cfg.Backend)
	remoteFlags(cmd, &cfg)
	return cmd
}

// writeDoctor prints what doctor found.
func writeDoctor(w io.Writer, s toolrunner.Sandboxes) {
	fmt.Fprintln(w, "sandbox backends on this machine:")
	for _, b := range s.Backends {
		state := "works"
		if !b.Works {
			state = "FAILS"
		}
		fmt.Fprintf(w, "  %-6s %s\n", b.Name, state)
		if b.Program != "" {
			fmt.Fprintf(w, "         program: %s\n", b.Program)
		}
		if !b.Works {
			fmt.Fprintf(w, "         why: %s\n", b.Why)
		}
		switch {
		case b.Limits == "ptrace":
			fmt.Fprintf(w, "         limits: set by the runner on each command, stopped after its execve (ptrace); no helper process\n")
		case b.Helper == "":
		case b.Helper == "/proc/self/exe":
			fmt.Fprintf(w, "         helper: this binary; a rath-sandbox-exec beside it saves ~20 ms of CPU per command (go install github.com/openrath/rath/services/tool-runner/rath-sandbox-exec)\n")
		default:
			fmt.Fprintf(w, "         helper: %s\n", b.Helper)
		}
		if b.Limits != "" && b.Limits != "ptrace" && b.Limits != "helper" {
			fmt.Fprintf(w, "         limits: %s\n", b.Limits)
		}
		if b.CallLimits != "" {
			fmt.Fprintf(w, "         call limits: %s\n", b.CallLimits)
		}
		if b.Filter != "" {
			fmt.Fprintf(w, "         filter: %s\n", b.Filter)
		}
		if b.Development {
			fmt.Fprintf(w, "         isolation: %s: for development only, commands run as the runner's user on this host\n", b.Isolation)
		} else {
			fmt.Fprintf(w, "         isolation: %s\n", b.Isolation)
		}
	}
	switch {
	case s.Default != "":
		fmt.Fprintf(w, "default backend: %s (--sandbox %s)\n", s.Default, s.Asked)
	case s.Asked == toolrunner.BackendAuto:
		fmt.Fprintln(w, "default backend: none works (--sandbox auto)")
	default:
		fmt.Fprintf(w, "default backend: %s, which does not work here (--sandbox %s)\n", s.Asked, s.Asked)
	}
	if s.Warning != "" {
		fmt.Fprintf(w, "WARNING: %s\n", s.Warning)
	}
}

// refusedError is a request a service refused and recorded in the session:
// exit status 4, as the ledger's refusals.
type refusedError struct{ msg string }

func (e *refusedError) Error() string { return e.msg }

func (a *app) toCmd() *cobra.Command {
	var (
		reason string
		wait   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "to SESSION [POOL/]BACKEND",
		Short: "Move a session to another sandbox backend (bwrap, gvisor, remote or local), or to a tool runner of another pool, between tool calls",
		Long: `to asks the tool runner to move SESSION to the sandbox BACKEND (bwrap;
gvisor; remote, where the runner has a remote sandbox service; or local:
development only, no isolation) with a rath.sandbox.requested event, and
waits for its answer. POOL/BACKEND (gpu/bwrap) moves it to a tool runner of
the pool POOL (one started with --pool POOL, on its own host): the workspace
travels through the object store at its head commit, with its history, and
the placement names the pool, host and runner; default/BACKEND comes back.
While no runner of the pool is connected the move waits, and so do the
session's later calls (rath state shows it moving). The runner takes the request in the session's order
with its tool calls: the calls before it finish where the session is, then it
places a new workspace on BACKEND seeded from the current one at its head
commit and records rath.sandbox.placed, whose from names the placement it
left; the calls after it run on BACKEND. A fork moves alone: its parent stays.

A move to the backend the session is on, to a backend the runner cannot run
here (and why), or back to a backend whose old workspace is behind is refused
and recorded as rath.sandbox.refused (exit status 4); a closed session takes
no request (4). If no tool runner answers within --wait the request stays in
the log and is answered when one runs (exit status 6).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			pool, backend, err := events.ParseWhere(args[1])
			if err != nil {
				return usageError{err}
			}
			if wait <= 0 {
				return usageError{fmt.Errorf("--wait must be positive, got %s", wait)}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			ack, err := c.Emit(ctx, id, &events.SandboxRequested{Backend: backend, Pool: pool, Reason: reason})
			if err != nil {
				return err
			}
			answer, err := a.awaitAnswer(ctx, c, id, ack.ID, ack.Seq, wait, pool)
			if err != nil {
				return err
			}
			switch d := answer.data.(type) {
			case *events.SandboxPlaced:
				if a.json {
					return a.printJSON(map[string]any{"session": id, "request_seq": ack.Seq, "seq": answer.seq, "placed": d})
				}
				writeMoved(a.Stdout, id, answer.seq, d)
				return nil
			case *events.SandboxRefused:
				if a.json {
					if err := a.printJSON(map[string]any{"session": id, "request_seq": ack.Seq, "seq": answer.seq, "refused": d}); err != nil {
						return err
					}
				}
				return &refusedError{fmt.Sprintf("the move of %s to %s was refused (seq %d): %s", id, args[1], answer.seq, d.Reason)}
			}
			return fmt.Errorf("to: unexpected answer %T", answer.data)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the request and the placement)")
	cmd.Flags().DurationVar(&wait, "wait", 2*time.Minute, "how long to wait for the tool runner's answer")
	return cmd
}

// answer is the tool runner's answer to a request.
type answer struct {
	seq  uint64
	data any
}

// errFound stops a watch.
var errFound = errors.New("found")

// awaitAnswer waits for the placement or refusal caused by the request.
// A move to a pool says, when no runner took it, that it waits for one.
func (a *app) awaitAnswer(ctx context.Context, c *client.Client, id, reqID string, reqSeq uint64, wait time.Duration, pool string) (answer, error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var got answer
	err := c.Watch(wctx, id, func(ev events.Stored) error {
		if ev.Causation != reqID || (ev.Type != events.TypeSandboxPlaced && ev.Type != events.TypeSandboxRefused) {
			return nil
		}
		d, err := ev.Decode()
		if err != nil {
			return fmt.Errorf("answer to the move of %s: %w", id, err)
		}
		got = answer{seq: ev.Seq, data: d}
		return errFound
	}, client.From(reqSeq+1), client.WithWarnings(func(w client.Warning) { fmt.Fprintf(a.Stderr, "rath: %s\n", w) }))
	switch {
	case errors.Is(err, errFound):
		return got, nil
	case ctx.Err() != nil:
		return answer{}, ctx.Err()
	case wctx.Err() != nil && pool != "":
		return answer{}, &unreachableError{fmt.Sprintf("no tool runner of pool %s took %s within %s: the move waits for one (tool-runner --pool %s), and so do the session's later calls; the request is in the log (seq %d) and rath state shows the session moving", pool, id, wait, pool, reqSeq), wctx.Err()}
	case wctx.Err() != nil:
		return answer{}, &unreachableError{fmt.Sprintf("no tool runner answered the move of %s within %s: is \"rath up\" running? The request is in the log (seq %d) and is answered when a tool runner takes it", id, wait, reqSeq), wctx.Err()}
	}
	return answer{}, err
}

// writeMoved prints a placement that answered a move.
func writeMoved(w io.Writer, id string, seq uint64, p *events.SandboxPlaced) {
	pooled := p.Pool != "" || p.From != nil && p.From.Pool != ""
	name := func(pool, backend string) string {
		if pooled {
			return events.PoolOf(pool) + "/" + backend
		}
		return backend
	}
	if p.From != nil {
		fmt.Fprintf(w, "%s moved from %s (%s) to %s (%s) at commit %s, seq %d\n", id, name(p.From.Pool, p.From.Backend), p.From.SandboxID, name(p.Pool, p.Backend), p.SandboxID, short(p.Commit), seq)
	} else {
		fmt.Fprintf(w, "%s placed on %s (%s) at commit %s, seq %d\n", id, name(p.Pool, p.Backend), p.SandboxID, short(p.Commit), seq)
	}
	if pooled && p.Runner != "" {
		fmt.Fprintf(w, "runner: %s\n", p.Runner)
	}
	fmt.Fprintf(w, "isolation: %s\n", isolationText(p.Backend, p.IsolationOf()))
}

// isolationText says what a placement isolates, in words for people: the
// local backend is said to be for development.
func isolationText(backend, isolation string) string {
	if events.Development(backend) {
		return "none: " + backend + " is a development backend, commands run as the tool runner's user on its host"
	}
	if isolation == "" {
		return "not recorded"
	}
	return isolation
}
