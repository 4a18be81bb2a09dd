package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// defaultURL is where the commands look for NATS when neither --nats nor
// RATH_NATS_URL says otherwise: where `rath up` listens by default.
const defaultURL = "nats://127.0.0.1:4222"

// defaultCreds is the credentials file the commands use when neither --creds
// nor RATH_CREDS names one: the client identity `rath up` writes under its
// default data directory.
var defaultCreds = filepath.Join(".rath", "data", "creds", auth.FileName(auth.RoleClient))

// env is everything rath reads from its process: main fills it, tests inject
// their own.
type env struct {
	Args   []string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// NATSURL is $RATH_NATS_URL ("" when unset).
	NATSURL string
	// Creds is $RATH_CREDS ("" when unset).
	Creds string
	// Self is the command that runs this rath again (selfCommand), for
	// the commands it prints; "" means rath.
	Self string
}

// self is the command that runs this rath again, for printed commands.
func (e env) self() string {
	if e.Self == "" {
		return "rath"
	}
	return e.Self
}

// app holds the global flags and the connection the commands share.
type app struct {
	env
	url     string
	creds   string
	json    bool
	timeout time.Duration

	// credsFrom names what named the credentials file: "--creds",
	// "RATH_CREDS", or "" when nothing did (the default).
	credsFrom string
	// started is set once cobra has parsed flags and arguments and a command
	// runs: an error before that is a usage error.
	started bool
	nc      *nats.Conn
	// principal is who the credentials name (the client of rath up's
	// default tenant when there are none).
	principal events.Principal
	// denied records the first permission violation NATS reported on nc.
	denied atomic.Pointer[error]
}

// execute runs the command line in e and returns the process exit code. It
// prints errors itself, as "rath: <message>" on stderr.
func execute(ctx context.Context, e env) int {
	a := &app{env: e}
	defer a.close()
	root := a.root()
	root.SetArgs(e.Args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	// Only a command line cobra could not parse (an unknown command or
	// flag, a wrong number of arguments) gets the pointer to --help: the
	// other usage errors name the flag or the file, which --help would not.
	parse := !a.started
	if parse {
		err = usageError{err}
	}
	err = a.forPeople(a.explain(err))
	fmt.Fprintf(e.Stderr, "rath: %v\n", err)
	if parse {
		fmt.Fprintf(e.Stderr, "Run '%s --help' for usage.\n", strings.Replace(cmd.CommandPath(), root.Name(), e.self(), 1))
	}
	return exitCode(err)
}

// root builds the command tree.
func (a *app) root() *cobra.Command {
	url := a.NATSURL
	if url == "" {
		url = defaultURL
	}
	root := &cobra.Command{
		Use:   "rath",
		Short: "Run and inspect Rath sessions: event-sourced agent sessions on NATS JetStream",
		Long: `rath runs a Rath runtime and talks to its session ledger.

"rath up" starts NATS with JetStream and Rath's five services in one process
(the session ledger, the memory service, the selector, the agent worker and
the tool runner); every other command is a client of the ledger at --nats.

Commands connect as the identity of --creds (env RATH_CREDS; default the
client.nk "rath up" writes in ./.rath/data/creds, here or in the nearest
parent directory that has one).

Exit codes: 0 ok, 1 other error, 2 usage error, 3 not found, 4 refused by the
ledger (or by the tool runner: rath to), 5 verify found a broken chain, 6 unavailable (nothing answered; retry),
7 a replay diverged from its original, 8 not authorized (no or unknown
credentials, or a permission the identity lacks), 9 the approval is not
pending (rath approve, rath reject: unknown or decided already), 10 over
quota (the tenant is at a quota of the ledger's: the message names it), 11
regressed (rath eval --baseline: a task's pass rate or cost beyond the
thresholds).`,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			a.started = true
			switch {
			case cmd.Flag("creds").Changed:
				a.credsFrom = "--creds"
			case a.Creds != "":
				a.credsFrom = "RATH_CREDS"
			}
			if a.timeout <= 0 {
				return usageError{fmt.Errorf("--timeout must be positive, got %s", a.timeout)}
			}
			return nil
		},
	}
	root.SetIn(a.Stdin)
	root.SetOut(a.Stdout)
	root.SetErr(a.Stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&a.url, "nats", url, "NATS server URL (env RATH_NATS_URL)")
	creds := a.Creds
	if creds == "" {
		creds = defaultCreds
	}
	pf.StringVar(&a.creds, "creds", creds, "credentials file of the identity to connect as (env RATH_CREDS; admin.nk beside it for operators; default: rath up's, here or in a parent directory)")
	pf.BoolVar(&a.json, "json", false, "print JSON instead of text")
	pf.DurationVar(&a.timeout, "timeout", 5*time.Second, "how long to wait for the ledger to answer")
	root.AddCommand(
		a.upCmd(),
		a.startCmd(), a.emitCmd(),
		a.watchCmd(), a.logCmd(), a.stateCmd(),
		a.forkCmd(), a.mergeCmd(), a.graphCmd(),
		a.lsCmd(),
		a.verifyCmd(), a.rejectsCmd(),
		a.schemaCmd(),
		a.memoryCmd(),
		a.demoCmd(),
		a.toCmd(), a.doctorCmd(), a.mcpProxyCmd(),
	)
	root.AddCommand(append(a.lifecycleCmds(), a.compactCmd())...)
	root.AddCommand(a.approvalCmds()...)
	root.AddCommand(a.exportCmd(), a.auditCmd())
	root.AddCommand(a.replayCmd(), a.diffCmd())
	root.AddCommand(a.evalCmd(), a.recheckCmd())
	root.AddCommand(a.credsCmd(), a.consoleCmd())
	layoutHelp(root)
	return root
}

// client connects on first use and returns a ledger client that gives up
// after --timeout.
func (a *app) client() (*client.Client, error) {
	if a.nc == nil {
		nc, err := a.connect()
		if err != nil {
			return nil, err
		}
		a.nc = nc
	}
	return client.New(a.nc, client.As(a.principal), client.WithTimeout(a.timeout), client.WithRetryFor(a.timeout), client.WithSource("rath/cli"))
}

// connect connects to --nats with the identity of --creds. When no file
// was named (neither --creds nor RATH_CREDS), it is the client.nk of the
// nearest data directory of rath up (findCreds), and may be missing: the
// server may not need any. One that was named must be usable.
func (a *app) connect() (*nats.Conn, error) {
	opts := []nats.Option{nats.Name("rath-cli"), nats.Timeout(a.timeout),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				a.denied.CompareAndSwap(nil, &err) // the first one is the cause
			}
		})}
	opts = append(opts, client.KeepAlive()...) // rath watch may follow a session for hours
	if a.credsFrom == "" && a.creds == defaultCreds {
		if found := findCreds(auth.RoleClient); found != "" {
			a.creds = found
		}
	}
	creds := a.creds
	cred, id, err := auth.Options(creds)
	a.principal = events.DefaultClient
	switch {
	case err == nil:
		opts = append(opts, cred...)
		a.principal = id.Principal
	case a.credsFrom == "" && errors.Is(err, auth.ErrNoCredentials):
		creds = "" // try without: the server may not need any
	case a.credsFrom == "":
		return nil, fmt.Errorf("%w: pass --creds FILE or set RATH_CREDS to use another", err)
	default:
		return nil, fmt.Errorf("%w (named by %s): %s", err, a.credsFrom, a.whereCreds(true))
	}
	nc, err := nats.Connect(a.url, opts...)
	switch {
	case err == nil:
		return nc, nil
	case errors.Is(err, nats.ErrAuthorization) && creds == "":
		return nil, &deniedError{fmt.Sprintf("NATS at %s requires credentials, and neither this directory nor a parent holds rath up's %s: %s", a.url, defaultCreds, a.whereCreds(false)), err}
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked):
		return nil, &deniedError{fmt.Sprintf("NATS at %s refused the credentials %s, an identity it does not know: %s", a.url, creds, a.whereCreds(a.credsFrom != "")), err}
	}
	return nil, &unreachableError{fmt.Sprintf("no NATS server at %s: is \"rath up\" running? Start it (rath up), or name the server with --nats URL (or RATH_NATS_URL)", a.url), err}
}

// whereCreds says where the credentials of the rath up at --nats are: the
// file itself when that rath up runs on this host as this user, else how
// to point at them. named: the user named a file already.
func (a *app) whereCreds(named bool) string {
	if p, dir := runningUp(a.url); dir != "" {
		file := filepath.Join(dir, auth.FileName(auth.RoleClient))
		if named {
			return fmt.Sprintf("the rath up at %s (pid %d) keeps its client credentials in %s", a.url, p.PID, file)
		}
		return fmt.Sprintf("the rath up there (pid %d) keeps them in %s: run rath in %s, or pass --creds %s (or set RATH_CREDS)", p.PID, dir, p.Dir, file)
	}
	if named {
		return fmt.Sprintf("rath up writes its client credentials as DIR/%s, DIR being the directory where it runs", defaultCreds)
	}
	return fmt.Sprintf("run rath in the directory where rath up runs (or below it), or pass --creds DIR/%s (or set RATH_CREDS), DIR being that directory", defaultCreds)
}

func (a *app) close() {
	if a.nc != nil {
		a.nc.Close()
	}
}

// explain turns "nobody answered" into a message that says what to do. A
// publish NATS refused for lack of permission is never answered or acked, so
// a permission violation seen on the connection explains a failure.
func (a *app) explain(err error) error {
	if v := a.denied.Load(); v != nil {
		return &deniedError{fmt.Sprintf("%v: the identity of %s lacks a permission this command needs (docs/security.md)", err, a.creds), *v}
	}
	var unreached *unreachableError
	if noAnswer(err) && !errors.As(err, &unreached) {
		return &unreachableError{fmt.Sprintf("no session ledger answered at %s: is \"rath up\" running?", a.url), err}
	}
	return err
}

// printJSON prints v as indented JSON.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printLine prints v as JSON on one line (for streams of results).
func (a *app) printLine(v any) error {
	enc := json.NewEncoder(a.Stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// labels parses repeated --label k=v flags.
func labels(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError{fmt.Errorf("--label %q: want key=value", kv)}
		}
		out[k] = v
	}
	return out, nil
}

// joinLabels prints labels as k=v pairs, sorted by key.
func joinLabels(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ", ")
}
