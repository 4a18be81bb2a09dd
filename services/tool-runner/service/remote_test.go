package service_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
	"github.com/openrath/rath/services/tool-runner/internal/sandbox/sandboxtest"
	"github.com/openrath/rath/services/tool-runner/service"
)

// remoteKey is the test service's API key: no event may hold it.
const remoteKey = "remote-key-9f8e7d6c"

// remoteService starts a remote sandbox service whose sandboxes run
// commands with the real bwrap backend.
func remoteService(t *testing.T) *sandboxtest.Service {
	t.Helper()
	needBwrap(t)
	cfg := sandbox.DefaultConfig()
	cfg.Root = t.TempDir()
	cfg.Path = os.Getenv("PATH")
	iso := sandbox.DefaultIsolation()
	iso.UIDBase = 310000 // apart from the other tests' sandbox users
	b, err := sandbox.NewIsolated(cfg, iso)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Probe(context.Background()); err != nil {
		t.Fatalf("bubblewrap cannot start a sandbox on this machine (user namespaces?): %v", err)
	}
	return sandboxtest.NewService(t, b, remoteKey)
}

func useRemote(s *sandboxtest.Service, key string) func(*service.Config) {
	return func(c *service.Config) {
		c.Remote.URL, c.Remote.Key, c.Remote.Image = s.Srv.URL, key, "rath-test"
	}
}

// A workflow that asks for the remote backend has its commands run in the
// service's sandbox: a file tool's write reaches the command, the
// command's file comes back, is committed and read by the next file tool;
// the placement says where commands run, and no event holds the key.
func TestRemoteBackend(t *testing.T) {
	s := remoteService(t)
	wf := strings.Replace(backendWorkflow("remote"), "tools: [run, write_file, read_file, list_files]", "tools: [run, write_file, read_file, list_files, apply_patch]", 1)
	r := setupWith(t, wf, sandboxUIDs, useRemote(s, remoteKey), func(c *service.Config) { c.Backend = "local" })
	r.startWith(t, "r1", nil)
	wrote := r.ok(t, "r1", "c1", "plain", "write_file", `{"path":"in.txt","content":"from a file tool\n"}`)
	if wrote == nil || wrote.Sandbox.Backend != "remote" || wrote.Sandbox.SandboxID != "remote-r1" {
		t.Fatalf("write_file %+v", wrote)
	}
	ran := r.ok(t, "r1", "c2", "plain", "run", `{"command":["sh","-c","cat in.txt; echo from the sandbox > out.txt"]}`)
	if ran == nil || !strings.Contains(ran.Result, "from a file tool") || ran.CommitAfter == ran.CommitBefore || ran.CommitAfter == "" {
		t.Fatalf("run %+v", ran)
	}
	read := r.ok(t, "r1", "c3", "plain", "read_file", `{"path":"out.txt"}`)
	if read == nil || !strings.Contains(read.Result, "from the sandbox") {
		t.Fatalf("read_file %+v", read)
	}
	// apply_patch runs git apply in the sandbox, its patch on standard input.
	patch := "--- a/out.txt\n+++ b/out.txt\n@@ -1 +1 @@\n-from the sandbox\n+patched remotely\n"
	args, _ := json.Marshal(map[string]string{"patch": patch})
	patched := r.ok(t, "r1", "c4", "plain", "apply_patch", string(args))
	if patched == nil || patched.CommitAfter == read.CommitAfter {
		t.Fatalf("apply_patch %+v", patched)
	}
	if read = r.ok(t, "r1", "c5", "plain", "read_file", `{"path":"out.txt"}`); read == nil || !strings.Contains(read.Result, "patched remotely") {
		t.Fatalf("read_file after the patch %+v", read)
	}
	p := r.placements(t, "r1")
	if len(p) != 1 || filepath.Base(filepath.Dir(p[0].Workspace)) != service.RemoteDir || !strings.HasPrefix(p[0].Isolation, "remote: ") ||
		!strings.Contains(p[0].Isolation, strings.TrimPrefix(s.Srv.URL, "http://")) {
		t.Fatalf("placements %+v", p)
	}
	if s.Count("POST /v1/sandboxes") != 1 {
		t.Errorf("%d sandboxes created for one session", s.Count("POST /v1/sandboxes"))
	}
	// The session's end deletes its sandbox.
	id, _ := s.Only()
	if _, err := r.c.Emit(context.Background(), "r1", &events.SessionClosed{Outcome: "done"}); err != nil {
		t.Fatal(err)
	}
	testrig.Eventually(t, time.Minute, "the closed session's sandbox "+id+" deleted", func() (bool, string) {
		return s.Box(id) == nil, "it is still there"
	})
	log, err := r.c.Log(context.Background(), "r1", client.Range{From: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range log {
		b, _ := json.Marshal(ev)
		if strings.Contains(string(b), remoteKey) {
			t.Errorf("event %s holds the API key", ev.Type)
		}
	}
}

// rath doctor's check: the remote backend works when the service answers
// and takes the key, and says why not otherwise, without the key.
func TestCheckRemoteSandbox(t *testing.T) {
	s := remoteService(t)
	check := func(opts ...func(*service.Config)) service.SandboxStatus {
		t.Helper()
		cfg := service.DefaultConfig()
		cfg.Sandbox.Root = t.TempDir()
		cfg.Sandbox.Path = os.Getenv("PATH")
		for _, o := range opts {
			o(&cfg)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		got, err := service.CheckSandboxes(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range got.Backends {
			if b.Name == "remote" {
				if strings.Contains(b.Why, remoteKey+"x") || strings.Contains(b.Why, remoteKey) {
					t.Errorf("why names the key: %s", b.Why)
				}
				return b
			}
		}
		t.Fatalf("no remote backend in %+v", got)
		return service.SandboxStatus{}
	}
	if b := check(useRemote(s, remoteKey)); !b.Works || !strings.Contains(b.Program, "OpenSandbox") || b.Helper != "" {
		t.Errorf("remote: %+v", b)
	}
	if b := check(useRemote(s, remoteKey+"x")); b.Works || !strings.Contains(b.Why, "401") {
		t.Errorf("remote with a wrong key: %+v", b)
	}
	cfg := service.DefaultConfig()
	cfg.Sandbox.Root = t.TempDir()
	cfg.Backend = "remote"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--remote-sandbox") {
		t.Errorf("remote as default without a URL: %v", err)
	}
}
