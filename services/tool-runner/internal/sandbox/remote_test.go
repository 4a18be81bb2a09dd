package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
	"github.com/openrath/rath/services/tool-runner/internal/sandbox/sandboxtest"
)

// newRemote returns the remote backend of the runner, speaking to s.
// testKey is the API key of the test service; no error may contain it.
const testKey = "sekrit-key-0c1d2e3f"

// newService starts the test service on top of the real bwrap backend, so
// that commands really run isolated.
func newService(t *testing.T) *sandboxtest.Service {
	t.Helper()
	// Its sandbox users are apart from those of the tests that count theirs.
	return sandboxtest.NewService(t, newIsolated(t, func(c *sandbox.Config, i *sandbox.Isolation) {
		c.Limits.Output = 1 << 20
		i.UIDBase = 320000
	}), testKey)
}

func newRemote(t *testing.T, s *sandboxtest.Service, opts ...func(*sandbox.Config, *sandbox.Remote)) *sandbox.Local {
	t.Helper()
	cfg := sandbox.DefaultConfig()
	cfg.Root = t.TempDir()
	cfg.Limits.Timeout = 20 * time.Second
	cfg.Limits.Output = 64 << 10
	rc := sandbox.DefaultRemote()
	rc.URL, rc.Key, rc.Image = s.Srv.URL, testKey, "rath-test"
	for _, o := range opts {
		o(&cfg, &rc)
	}
	b, err := sandbox.NewRemote(cfg, rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// noKey fails the test if err's text holds the API key.
func noKey(t *testing.T, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), testKey) {
		t.Fatalf("an error names the API key: %v", err)
	}
}

func TestRemoteRunSyncsBothWays(t *testing.T) {
	t.Parallel()
	s := newService(t)
	b := newRemote(t, s)
	if err := b.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	seed := t.TempDir()
	writeFiles(t, seed, map[string]string{"a.txt": "from the runner\n", "gone.txt": "x\n", "sub/keep.txt": "k\n"})
	ws := place(t, b, "s1", &sandbox.Seed{Dir: seed})
	if ws.Backend() != sandbox.BackendRemote || ws.ID() != "remote-s1" {
		t.Errorf("backend %q id %q", ws.Backend(), ws.ID())
	}
	head, err := ws.Head(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	res := run(t, ws, sh("cat a.txt; id -u; echo new > b.txt; rm gone.txt; mkdir -p d; printf '#!/bin/sh\\n' > d/run; chmod +x d/run; echo oops >&2; exit 3"))
	if res.ExitCode != 3 || res.Stdout != "from the runner\n1000\n" || res.Stderr != "oops\n" || res.TimedOut || res.Killed {
		t.Errorf("got %+v", res)
	}
	if !strings.Contains(res.Limits, "remote sandbox service") {
		t.Errorf("limits %q", res.Limits)
	}
	if got := readFile(t, filepath.Join(ws.Dir(), "b.txt")); got != "new\n" {
		t.Errorf("b.txt = %q", got)
	}
	if _, err := os.Stat(filepath.Join(ws.Dir(), "gone.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("gone.txt was not deleted: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(ws.Dir(), "d/run")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("d/run: %v %v", fi, err)
	}
	commit, err := ws.Commit(context.Background(), "remote run")
	if err != nil {
		t.Fatal(err)
	}
	diff, err := ws.Diff(context.Background(), head, commit)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"b/b.txt", "deleted file mode", "b/d/run", "new file mode 100755"} {
		if !strings.Contains(diff, want) {
			t.Errorf("diff lacks %q:\n%s", want, diff)
		}
	}

	// File tools edit the local workspace; the next command sees it.
	p, err := ws.Resolve("a.txt")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(ws.Dir(), "sub/keep.txt")); err != nil {
		t.Fatal(err)
	}
	uploads := s.Count("POST /exec/files/upload")
	res = run(t, ws, sh("cat a.txt; ls sub | wc -l"))
	if res.ExitCode != 0 || res.Stdout != "edited\n0\n" {
		t.Errorf("got %+v", res)
	}
	if got := s.Count("POST /exec/files/upload") - uploads; got != 1 {
		t.Errorf("%d upload requests for one changed file", got)
	}
	// Nothing changed on either side: nothing is sent, nothing comes back.
	uploads, downloads := s.Count("POST /exec/files/upload"), s.Count("GET /exec/files/download")
	res = run(t, ws, sh("true"))
	if res.ExitCode != 0 {
		t.Errorf("got %+v", res)
	}
	if s.Count("POST /exec/files/upload") != uploads {
		t.Errorf("an unchanged workspace was uploaded again")
	}
	_ = downloads // racy entries of the previous listing may be fetched again

	// Standard input reaches the command.
	res = run(t, ws, sandbox.Cmd{Args: []string{"sh", "-c", "cat > in.txt; wc -c < in.txt"}, Stdin: strings.NewReader("it's \"quoted\"\n")})
	if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "14" || readFile(t, filepath.Join(ws.Dir(), "in.txt")) != "it's \"quoted\"\n" {
		t.Errorf("stdin: %+v", res)
	}
	if _, err := ws.Run(context.Background(), sandbox.Cmd{Args: []string{"cat"}, Stdin: strings.NewReader(strings.Repeat("x", 65<<10))}); err == nil || !strings.Contains(err.Error(), "standard input") {
		t.Errorf("oversized stdin: %v", err)
	}

	// The sandbox is the service's: deleting it is the runner's to ask.
	id, _ := s.Only()
	if err := b.Discard(context.Background(), "s1"); err != nil {
		t.Fatal(err)
	}
	if s.Box(id) != nil {
		t.Errorf("sandbox %s not deleted", id)
	}
	// The next command gets a new sandbox, filled from the workspace.
	res = run(t, ws, sh("cat a.txt b.txt"))
	if res.ExitCode != 0 || res.Stdout != "edited\nnew\n" {
		t.Errorf("after discard: %+v", res)
	}
}

func TestRemoteExpiredSandboxIsMadeAgain(t *testing.T) {
	t.Parallel()
	s := newService(t)
	ws := place(t, newRemote(t, s), "s1", nil)
	run(t, ws, sh("echo one > one.txt"))
	id, _ := s.Only()
	// The service expires the sandbox behind the runner's back.
	s.Expire(id)
	res := run(t, ws, sh("cat one.txt"))
	if res.ExitCode != 0 || res.Stdout != "one\n" {
		t.Errorf("got %+v", res)
	}
	if s.Count("POST /v1/sandboxes") != 2 {
		t.Errorf("%d sandboxes created, want 2", s.Count("POST /v1/sandboxes"))
	}
}

func TestRemoteTimeoutAndTruncation(t *testing.T) {
	t.Parallel()
	s := newService(t)
	ws := place(t, newRemote(t, s, func(c *sandbox.Config, _ *sandbox.Remote) { c.Limits.Output = 1024 }), "s1", nil)
	res := run(t, ws, sandbox.Cmd{Args: []string{"sleep", "30"}, Timeout: time.Second})
	if !res.TimedOut || !res.Killed || res.ExitCode != 137 || !strings.Contains(res.Stopped, "wall-time") {
		t.Errorf("timeout: %+v", res)
	}
	res = run(t, ws, sh("head -c 100000 /dev/zero | tr '\\0' x; echo err >&2"))
	if !res.Truncated || res.StdoutBytes != 100000 || len(res.Stdout) != 1024 || res.Stderr != "err\n" {
		t.Errorf("truncation: bytes %d kept %d truncated %v stderr %q", res.StdoutBytes, len(res.Stdout), res.Truncated, res.Stderr)
	}
}

// Every answer of the service is hostile: each below is refused with an
// error naming the problem, writes nothing outside the workspace nor into
// its .git, and never names the key.
func TestRemoteRefusesHostileAnswers(t *testing.T) {
	t.Parallel()
	listing := func(entries ...map[string]any) func(w http.ResponseWriter, r *http.Request) bool {
		return func(w http.ResponseWriter, r *http.Request) bool {
			if !strings.HasSuffix(r.URL.Path, "/files/search") {
				return false
			}
			sandboxtest.WriteJSON(w, http.StatusOK, entries)
			return true
		}
	}
	entry := func(p string, size int) map[string]any {
		return map[string]any{"path": p, "size": size, "modified_at": time.Now(), "mode": 644}
	}
	outside := t.TempDir()
	cases := []struct {
		name  string
		hook  func(w http.ResponseWriter, r *http.Request) bool
		setup func(t *testing.T, ws sandbox.Workspace)
		opt   func(*sandbox.Config, *sandbox.Remote)
		want  string
	}{
		{name: "dotdot", hook: listing(entry("/workspace/../../etc/passwd", 5)), want: "leaves the workspace"},
		{name: "absolute outside", hook: listing(entry("/etc/passwd", 5)), want: "outside the workspace"},
		{name: "relative", hook: listing(entry("etc/passwd", 5)), want: "not absolute"},
		{name: "unclean", hook: listing(entry("/workspace/a/./b", 5)), want: "not a clean path"},
		{name: "git hook", hook: listing(entry("/workspace/.git/hooks/pre-commit", 5)), want: ".git"},
		{name: "nested git", hook: listing(entry("/workspace/sub/.GIT/config", 5)), want: ".git"},
		{name: "symlink to /", hook: listing(entry("/workspace/up"+outside+"/evil", 5)), want: "symbolic link",
			setup: func(t *testing.T, ws sandbox.Workspace) {
				// A link a seed or an earlier command left in the workspace.
				if err := os.Symlink("/", filepath.Join(ws.Dir(), "up")); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "oversized listing entry", hook: listing(entry("/workspace/big", 1<<40)), want: "over the"},
		{name: "too many entries", hook: listing(entry("/workspace/a", 1), entry("/workspace/b", 1), entry("/workspace/c", 1)),
			opt: func(_ *sandbox.Config, r *sandbox.Remote) { r.MaxEntries = 2 }, want: "more than the 2 allowed"},
		{name: "oversized listing", hook: func(w http.ResponseWriter, r *http.Request) bool {
			if !strings.HasSuffix(r.URL.Path, "/files/search") {
				return false
			}
			w.Write([]byte("[" + strings.Repeat(" ", 4<<10)))
			return true
		}, opt: func(_ *sandbox.Config, r *sandbox.Remote) { r.MaxEntries = 2 }, want: "larger than"},
		{name: "oversized download", hook: func(w http.ResponseWriter, r *http.Request) bool {
			switch {
			case strings.HasSuffix(r.URL.Path, "/files/search"):
				sandboxtest.WriteJSON(w, http.StatusOK, []any{entry("/workspace/f", 10)})
			case strings.HasSuffix(r.URL.Path, "/files/download"):
				w.Write([]byte(strings.Repeat("x", 2<<10)))
			default:
				return false
			}
			return true
		}, opt: func(_ *sandbox.Config, r *sandbox.Remote) { r.MaxFileBytes = 1 << 10 }, want: "over the 1024 bytes"},
		{name: "malformed listing", hook: func(w http.ResponseWriter, r *http.Request) bool {
			if !strings.HasSuffix(r.URL.Path, "/files/search") {
				return false
			}
			w.Write([]byte(`[{"path": "/workspace/a", "size": "many"}]`))
			return true
		}, want: "malformed JSON"},
		{name: "malformed event", hook: func(w http.ResponseWriter, r *http.Request) bool {
			if !strings.HasSuffix(r.URL.Path, "/command") {
				return false
			}
			w.Write([]byte("data: {\"type\": \"stdout\", \"text\": 3\n\n"))
			return true
		}, want: "malformed event"},
		{name: "stream cut", hook: func(w http.ResponseWriter, r *http.Request) bool {
			if !strings.HasSuffix(r.URL.Path, "/command") {
				return false
			}
			w.Write([]byte("data: {\"type\": \"stdout\", \"text\": \"partial\"}\n\n"))
			return true
		}, want: "ended before the command did"},
		{name: "5xx echoing the key", hook: func(w http.ResponseWriter, r *http.Request) bool {
			if !strings.HasSuffix(r.URL.Path, "/command") {
				return false
			}
			sandboxtest.WriteJSON(w, http.StatusInternalServerError, map[string]string{"message": "failed for key " + testKey})
			return true
		}, want: "500 Internal Server Error"},
		{name: "redirect", hook: func(w http.ResponseWriter, r *http.Request) bool {
			if r.Method != http.MethodPost || r.URL.Path != "/v1/sandboxes" {
				return false
			}
			http.Redirect(w, r, "http://127.0.0.2:1/steal", http.StatusTemporaryRedirect)
			return true
		}, want: "307"},
		{name: "service hangs", hook: func(w http.ResponseWriter, r *http.Request) bool {
			if !strings.HasSuffix(r.URL.Path, "/files/search") {
				return false
			}
			<-r.Context().Done() // until the runner gives up
			return true
		}, opt: func(_ *sandbox.Config, r *sandbox.Remote) { r.RequestTimeout = time.Second }, want: "deadline exceeded"},
		{name: "endpoint elsewhere", hook: func(w http.ResponseWriter, r *http.Request) bool {
			if !strings.Contains(r.URL.Path, "/endpoints/") {
				return false
			}
			sandboxtest.WriteJSON(w, http.StatusOK, map[string]string{"endpoint": "attacker.example:443/exec"})
			return true
		}, want: "not on the service's host"},
		{name: "bad sandbox id", hook: func(w http.ResponseWriter, r *http.Request) bool {
			if r.Method != http.MethodPost || r.URL.Path != "/v1/sandboxes" {
				return false
			}
			sandboxtest.WriteJSON(w, http.StatusAccepted, map[string]string{"id": "../../admin"})
			return true
		}, want: "unusable sandbox ID"},
		{name: "failed sandbox", hook: func(w http.ResponseWriter, r *http.Request) bool {
			if r.Method != http.MethodGet || !strings.HasPrefix(r.URL.Path, "/v1/sandboxes/") || strings.Contains(r.URL.Path, "endpoints") {
				return false
			}
			sandboxtest.WriteJSON(w, http.StatusOK, map[string]any{"status": map[string]string{"state": "Failed", "reason": "ImagePullBackOff"}})
			return true
		}, want: "ImagePullBackOff"},
	}
	s := newService(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := []func(*sandbox.Config, *sandbox.Remote){}
			if c.opt != nil {
				opts = append(opts, c.opt)
			}
			ws := place(t, newRemote(t, s, opts...), "s-"+strings.NewReplacer(" ", "-", "/", "root").Replace(c.name), nil)
			if c.setup != nil {
				c.setup(t, ws)
			}
			before := tree(t, ws.Dir())
			s.SetHook(c.hook)
			_, err := ws.Run(context.Background(), sh("echo hi"))
			s.SetHook(nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error naming %q", err, c.want)
			}
			noKey(t, err)
			if after := tree(t, ws.Dir()); after != before {
				t.Errorf("the workspace changed:\n%s\nbecame\n%s", before, after)
			}
			if _, err := os.Lstat(filepath.Join(outside, "evil")); err == nil {
				t.Errorf("a file was written outside the workspace")
			}
		})
	}
}

// tree lists a directory's entries (its .git too) with their sizes.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(&b, "%s %v %d\n", rel, fi.Mode().Type(), fi.Size())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestRemoteServiceDownAndBadKey(t *testing.T) {
	t.Parallel()
	s := newService(t)
	bad := newRemote(t, s, func(_ *sandbox.Config, r *sandbox.Remote) { r.Key = testKey + "-wrong" })
	err := bad.Probe(context.Background())
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("probe with a wrong key: %v", err)
	}
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	b := newRemote(t, s, func(_ *sandbox.Config, r *sandbox.Remote) { r.URL = down.URL })
	err = b.Probe(context.Background())
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("probe of a service that is down: %v", err)
	}
	noKey(t, err)
	ws := place(t, b, "s1", nil)
	_, err = ws.Run(context.Background(), sh("true"))
	if err == nil || !strings.Contains(err.Error(), "create a remote sandbox") {
		t.Errorf("run with the service down: %v", err)
	}
	noKey(t, err)
}

func TestRemoteTLS(t *testing.T) {
	t.Parallel()
	s := newService(t)
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(s.ServeHTTP))
	t.Cleanup(tlsSrv.Close)
	b := newRemote(t, s, func(_ *sandbox.Config, r *sandbox.Remote) {
		r.URL, r.Transport = tlsSrv.URL, tlsSrv.Client().Transport
	})
	if err := b.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Without the test CA, the certificate is refused.
	untrusted := newRemote(t, s, func(_ *sandbox.Config, r *sandbox.Remote) { r.URL = tlsSrv.URL })
	if err := untrusted.Probe(context.Background()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("an untrusted certificate: %v", err)
	}
}

func TestRemoteValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url, want string
	}{
		{"http://sandboxes.example", "want https"},
		{"https://user:" + testKey + "@sandboxes.example", "user information"},
		{"", "URL is required"},
		{"ftp://127.0.0.1", "want https"},
	} {
		rc := sandbox.DefaultRemote()
		rc.URL, rc.Image = c.url, "img"
		err := rc.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.url, err, c.want)
		}
		noKey(t, err)
	}
	rc := sandbox.DefaultRemote()
	rc.URL, rc.Image = "http://127.0.0.1:8080", "img"
	if err := rc.Validate(); err != nil {
		t.Errorf("loopback http: %v", err)
	}
}
