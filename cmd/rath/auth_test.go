package main

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/session-ledger/service"
)

// rathWith runs the command line as given: no --creds is added.
func rathWith(e env, args ...string) result {
	var out, errb bytes.Buffer
	e.Args, e.Stdin, e.Stdout, e.Stderr = args, strings.NewReader(""), &out, &errb
	code := execute(context.Background(), e)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// Missing, unknown and insufficient credentials are exit code 8, with a
// message naming the file, never a timeout or NATS jargon alone.
func TestCredentialErrors(t *testing.T) {
	url := startLedger(t)
	creds := func(r auth.Role) string { return natstest.CredsFile(t, url, r) }

	t.Run("default file missing", func(t *testing.T) {
		r := rathWith(env{}, "--nats", url, "ls")
		if r.code != exitDenied || !strings.Contains(r.stderr, defaultCreds) || !strings.Contains(r.stderr, "--creds") {
			t.Errorf("exit %d, stderr %q; want %d naming %s", r.code, r.stderr, exitDenied, defaultCreds)
		}
	})
	t.Run("named file missing", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "nope.creds")
		for _, r := range []result{
			rathWith(env{}, "--nats", url, "--creds", missing, "ls"),
			rathWith(env{Creds: missing}, "--nats", url, "ls"),
		} {
			if r.code != exitDenied || !strings.Contains(r.stderr, missing) {
				t.Errorf("exit %d, stderr %q; want %d naming %s", r.code, r.stderr, exitDenied, missing)
			}
		}
	})
	t.Run("unknown identity", func(t *testing.T) {
		other, err := auth.Ensure(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		r := rathWith(env{}, "--nats", url, "--creds", other.Path(auth.RoleClient), "ls")
		if r.code != exitDenied || !strings.Contains(r.stderr, "refused the credentials "+other.Path(auth.RoleClient)) {
			t.Errorf("exit %d, stderr %q; want %d naming the file", r.code, r.stderr, exitDenied)
		}
	})
	t.Run("RATH_CREDS", func(t *testing.T) {
		r := rathWith(env{Creds: creds(auth.RoleClient)}, "--nats", url, "ls")
		if r.code != exitOK {
			t.Errorf("ls with RATH_CREDS: exit %d, stderr %q", r.code, r.stderr)
		}
	})
	t.Run("permission lacking", func(t *testing.T) {
		// The ledger's identity answers requests; it may not ask them (the
		// first a start of a workflow asks is the tool registry).
		wf := filepath.Join("..", "..", "examples", "fix-calc", "workflow.yaml")
		r := rathWith(env{}, "--nats", url, "--creds", creds(auth.RoleLedger), "--timeout", "2s", "start", "--workflow", wf)
		if r.code != exitDenied || !strings.Contains(r.stderr, creds(auth.RoleLedger)) || !strings.Contains(r.stderr, "rath.ledger.rath.ledger.tools") {
			t.Errorf("exit %d, stderr %q; want %d naming the credentials and the subject", r.code, r.stderr, exitDenied)
		}
		// The client's may.
		r = rathWith(env{}, "--nats", url, "--creds", creds(auth.RoleClient), "start", "--workflow", wf)
		if r.code != exitOK {
			t.Errorf("start --workflow as client: exit %d, stderr %q", r.code, r.stderr)
		}
	})
}

// On a NATS server in operator mode the CLI takes a standard NATS user
// credentials file and acts as the principal its JWT's tag names; a file
// without the tag, or an expired one, is exit code 8 naming the file and
// saying what is wrong.
func TestOperatorModeCredsCLI(t *testing.T) {
	op := natstest.StartOperator(t)
	lnc, err := nats.Connect(op.URL(), ledgerOpts(t, op)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lnc.Close)
	testrig.Run(t, "ledger", func(ctx context.Context) error {
		return service.Run(ctx, lnc, service.ConfigIn(t.TempDir()), slog.New(slog.DiscardHandler))
	})
	alice := events.Principal{Tenant: "acme", User: "alice"}
	creds := op.CredsFile(t, "alice", auth.RoleClient, alice)
	if r := rathWith(env{}, "--nats", op.URL(), "--creds", creds, "start", "--id", "jwt-1", "--task", "t"); r.code != exitOK {
		t.Fatalf("start with %s: exit %d, stderr %q", creds, r.code, r.stderr)
	}
	if r := rathWith(env{}, "--nats", op.URL(), "--creds", creds, "ls"); r.code != exitOK || !strings.Contains(r.stdout, "jwt-1") {
		t.Errorf("ls with %s: exit %d, stdout %q, stderr %q", creds, r.code, r.stdout, r.stderr)
	}
	untagged := op.CredsFile(t, "untagged", auth.RoleClient, alice, func(c *jwt.UserClaims) { c.Tags = nil })
	expired := op.CredsFile(t, "expired", auth.RoleClient, alice, func(c *jwt.UserClaims) { c.Expires = time.Now().Add(-time.Minute).Unix() })
	for path, want := range map[string]string{untagged: "--tag rath-principal:", expired: "expired at"} {
		r := rathWith(env{}, "--nats", op.URL(), "--creds", path, "ls")
		if r.code != exitDenied || !strings.Contains(r.stderr, path) || !strings.Contains(r.stderr, want) {
			t.Errorf("ls with %s: exit %d, stderr %q; want %d naming the file and saying %q", path, r.code, r.stderr, exitDenied, want)
		}
	}
}

// ledgerOpts are the ledger's connection options from its NATS user
// credentials file on op.
func ledgerOpts(t *testing.T, op *natstest.Operator) []nats.Option {
	t.Helper()
	opts, _, err := auth.Options(op.CredsFile(t, "ledger", auth.RoleLedger, auth.RoleLedger.Principal()))
	if err != nil {
		t.Fatal(err)
	}
	return opts
}
