package main

import (
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/natstest"
)

// A bad flag is refused as such, with exit code 2, before the worker tries
// to connect anywhere (here to a port nothing listens on).
func TestBadFlagIsRefusedBeforeConnecting(t *testing.T) {
	if os.Getenv("AGENT_WORKER_RUN_MAIN") == "1" {
		os.Args = []string{"agent-worker", "--nats", "nats://127.0.0.1:1", "--context-cache-bytes", "-5"}
		flag.CommandLine = flag.NewFlagSet("agent-worker", flag.ExitOnError)
		main()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestBadFlagIsRefusedBeforeConnecting$")
	cmd.Env = append(os.Environ(), "AGENT_WORKER_RUN_MAIN=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("exit %v, want code 2; output:\n%s", err, out)
	}
	if s := string(out); !strings.Contains(s, "context cache size must not be negative, got -5") || strings.Contains(s, "connect to") {
		t.Fatalf("output does not name the flag, or it tried to connect:\n%s", out)
	}
}

// A malformed --allow-base-url is a bad flag too.
func TestBadAllowedEndpointIsRefusedBeforeConnecting(t *testing.T) {
	if os.Getenv("AGENT_WORKER_RUN_MAIN") == "2" {
		os.Args = []string{"agent-worker", "--nats", "nats://127.0.0.1:1", "--allow-loopback-endpoints",
			"--allow-base-url", "openai=http://127.0.0.1:8080/v1", "--allow-base-url", "openai=127.0.0.1:8080"}
		flag.CommandLine = flag.NewFlagSet("agent-worker", flag.ExitOnError)
		main()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestBadAllowedEndpointIsRefusedBeforeConnecting$")
	cmd.Env = append(os.Environ(), "AGENT_WORKER_RUN_MAIN=2")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("exit %v, want code 2; output:\n%s", err, out)
	}
	if s := string(out); !strings.Contains(s, "--allow-base-url: endpoint openai=127.0.0.1:8080: not an http or https URL") || strings.Contains(s, "connect to") {
		t.Fatalf("output does not name the flag, or it tried to connect:\n%s", out)
	}
}

// With --with-selector, the selector connects as --selector-creds: a file
// that cannot be read stops the process (exit 1) naming that flag, after
// the worker's own connection was made with --creds.
func TestWithSelectorConnectsAsSelectorCreds(t *testing.T) {
	if url := os.Getenv("AGENT_WORKER_NATS"); os.Getenv("AGENT_WORKER_RUN_MAIN") == "3" {
		os.Args = []string{"agent-worker", "--nats", url, "--creds", os.Getenv("AGENT_WORKER_CREDS"),
			"--with-selector", "--selector-creds", filepath.Join(os.TempDir(), "no-such-dir", "selector.nk")}
		flag.CommandLine = flag.NewFlagSet("agent-worker", flag.ExitOnError)
		main()
		return
	}
	ns, _ := natstest.Start(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestWithSelectorConnectsAsSelectorCreds$")
	cmd.Env = append(os.Environ(), "AGENT_WORKER_RUN_MAIN=3", "AGENT_WORKER_NATS="+ns.ClientURL(),
		"AGENT_WORKER_CREDS="+natstest.CredsFile(t, ns.ClientURL(), auth.RoleAgentWorker))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit %v, want code 1; output:\n%s", err, out)
	}
	if s := string(out); !strings.Contains(s, "selector: --selector-creds:") {
		t.Fatalf("output does not name --selector-creds:\n%s", out)
	}
}
