package auth_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/events"
)

const operatorScript = "../../deploy/nats-operator/rath-nsc.sh"

// The committed nsc templates are the generator's output.
func TestOperatorScriptIsGenerated(t *testing.T) {
	want := auth.OperatorScript()
	if *update {
		if err := os.WriteFile(operatorScript, want, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(operatorScript)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from auth.OperatorScript(): run go test ./internal/auth -update", operatorScript)
	}
}

// nscCall is one call of nsc the script made: its arguments.
type nscCall []string

// runScript runs the generated script with a stand-in nsc that records its
// arguments (one per line, calls separated by a line "--"), and returns the
// calls, the standard error and the exit status.
func runScript(t *testing.T, args ...string) ([]nscCall, string, error) {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to run the script with")
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "calls")
	fake := "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done >>" + log + "\necho -- >>" + log + "\n"
	if err := os.WriteFile(filepath.Join(dir, "nsc"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "rath-nsc.sh")
	if err := os.WriteFile(script, auth.OperatorScript(), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sh, append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	runErr := cmd.Run()
	b, _ := os.ReadFile(log)
	var calls []nscCall
	var cur nscCall
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSuffix(line, "\n")
		if line == "--" {
			calls = append(calls, cur)
			cur = nil
			continue
		}
		cur = append(cur, line)
	}
	return calls, stderr.String(), runErr
}

// flagValues returns the values of every occurrence of flag in call.
func flagValues(call nscCall, flag string) []string {
	var out []string
	for i, a := range call {
		if a == flag && i+1 < len(call) {
			out = append(out, call[i+1])
		}
	}
	return out
}

// The script's nsc commands give each user exactly the table's permissions,
// subjects intact through the shell's quoting ($JS.API... stays literal, a
// client's tenant and user fill in), and the principal tag Rath reads.
func TestOperatorScriptPermissions(t *testing.T) {
	alice := events.Principal{Tenant: "acme", User: "alice"}
	cases := []struct {
		args []string
		name string
		p    auth.Permissions
		tag  string
	}{
		{[]string{"service", "ledger"}, "ledger", auth.RoleLedger.Permissions(), "rath-principal:rath/ledger"},
		{[]string{"service", "tool-runner"}, "tool-runner", auth.RoleToolRunner.Permissions(), "rath-principal:rath/tool-runner"},
		{[]string{"service", "admin"}, "admin", auth.RoleAdmin.Permissions(), "rath-principal:rath/admin"},
		{[]string{"client", "acme", "alice"}, "acme-alice", auth.ClientPermissions(alice), "rath-principal:acme/alice"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			calls, stderr, err := runScript(t, c.args...)
			if err != nil {
				t.Fatalf("rath-nsc.sh %v: %v: %s", c.args, err, stderr)
			}
			if len(calls) != 2 || calls[0][0] != "add" || calls[1][0] != "edit" {
				t.Fatalf("calls: %q", calls)
			}
			add, edit := calls[0], calls[1]
			if n := flagValues(add, "--name"); !slices.Equal(n, []string{c.name}) {
				t.Errorf("name %q, want %s", n, c.name)
			}
			for _, f := range []struct {
				flag string
				want []string
			}{
				{"--allow-pub", c.p.Publish.Allow}, {"--deny-pub", c.p.Publish.Deny},
				{"--allow-sub", c.p.Subscribe.Allow}, {"--deny-sub", c.p.Subscribe.Deny},
			} {
				if got := flagValues(add, f.flag); !slices.Equal(got, f.want) {
					t.Errorf("%s %q, want %q", f.flag, got, f.want)
				}
			}
			if got := len(flagValues(add, "--allow-pub-response")) == 1; got != c.p.Respond {
				t.Errorf("--allow-pub-response %v, want %v", got, c.p.Respond)
			}
			if tag := flagValues(edit, "--tag"); !slices.Equal(tag, []string{c.tag}) {
				t.Errorf("tag %q, want %s", tag, c.tag)
			}
		})
	}
	if calls, _, err := runScript(t, "account"); err != nil || len(calls) != 2 || !slices.Contains(calls[1], "--js-disk-storage") {
		t.Errorf("account: %v, %q", err, calls)
	}
}

// Names that are not Rath's are refused before nsc runs, saying why.
func TestOperatorScriptRefuses(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"client", "rath", "eve"}, "Rath's own"},
		{[]string{"client", "acme", "Eve"}, "invalid name 'Eve'"},
		{[]string{"client", "acme", "a.b"}, "invalid name 'a.b'"},
		{[]string{"client", "ac me", "x"}, "invalid name"},
		{[]string{"client", "acme", "*"}, "invalid name"},
		{[]string{"client", "acme", ""}, "invalid name"},
		{[]string{"service", "root"}, "unknown role root"},
		{[]string{"service", "client"}, "unknown role client"},
		{[]string{"nonsense"}, "Usage"},
		{nil, "Usage"},
	} {
		calls, stderr, err := runScript(t, c.args...)
		if err == nil || len(calls) != 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("rath-nsc.sh %q: %v, calls %q, stderr %q, want a refusal saying %q", c.args, err, calls, stderr, c.want)
		}
	}
}
