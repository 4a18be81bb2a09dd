package sandbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// testKey is the API key of the test service; no error may contain it.
const testKey = "sekrit-key-0c1d2e3f"

// service is a remote sandbox service for the tests: the subset of
// OpenSandbox's lifecycle and execd APIs the remote backend speaks (ADR
// 0041), on top of the real bwrap backend, so that commands really run
// isolated. Its sandboxes' /workspace is a bwrap workspace's directory.
type service struct {
	t     *testing.T
	bwrap *sandbox.Local
	srv   *httptest.Server
	mu    sync.Mutex
	n     int
	boxes map[string]sandbox.Workspace
	// hook, when set, may answer a request itself (returning true): the
	// tests' hostile services.
	hook func(w http.ResponseWriter, r *http.Request) bool
	// calls counts requests by method and path pattern.
	calls map[string]int
}

func newService(t *testing.T) *service {
	t.Helper()
	s := &service{t: t, boxes: map[string]sandbox.Workspace{}, calls: map[string]int{}}
	s.bwrap = newIsolated(t, func(c *sandbox.Config, _ *sandbox.Isolation) { c.Limits.Output = 1 << 20 })
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *service) setHook(h func(w http.ResponseWriter, r *http.Request) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hook = h
}

func (s *service) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[key]
}

func (s *service) box(id string) sandbox.Workspace {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.boxes[id]
}

// only returns the one sandbox the service holds.
func (s *service) only() (string, sandbox.Workspace) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.boxes) != 1 {
		s.t.Fatalf("the service holds %d sandboxes, want 1", len(s.boxes))
	}
	for id, ws := range s.boxes {
		return id, ws
	}
	return "", nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *service) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("OPEN-SANDBOX-API-KEY") != testKey {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"code": "UNAUTHORIZED", "message": "bad key"})
		return
	}
	s.mu.Lock()
	hook := s.hook
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	key := r.Method + " " + r.URL.Path
	if len(parts) >= 3 && parts[0] == "exec" {
		key = r.Method + " /exec/" + strings.Join(parts[2:], "/")
	}
	s.calls[key]++
	s.mu.Unlock()
	if hook != nil && hook(w, r) {
		return
	}
	switch {
	case len(parts) >= 2 && parts[0] == "v1" && parts[1] == "sandboxes":
		s.lifecycle(w, r, parts[2:])
	case len(parts) >= 3 && parts[0] == "exec":
		ws := s.box(parts[1])
		if ws == nil {
			writeJSON(w, http.StatusNotFound, map[string]string{"message": "no such sandbox"})
			return
		}
		s.execd(w, r, ws, strings.Join(parts[2:], "/"))
	default:
		http.NotFound(w, r)
	}
}

func (s *service) lifecycle(w http.ResponseWriter, r *http.Request, rest []string) {
	switch {
	case len(rest) == 0 && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]any{"items": []any{}})
	case len(rest) == 0 && r.Method == http.MethodPost:
		var req struct {
			Image struct {
				URI string `json:"uri"`
			} `json:"image"`
			Timeout    int               `json:"timeout"`
			Entrypoint []string          `json:"entrypoint"`
			Metadata   map[string]string `json:"metadata"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Image.URI == "" || req.Timeout <= 0 || len(req.Entrypoint) == 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"message": "bad request"})
			return
		}
		s.mu.Lock()
		s.n++
		id := fmt.Sprintf("sbx-%d", s.n)
		s.mu.Unlock()
		ws, err := s.bwrap.Place(r.Context(), "box"+strconv.Itoa(s.n), nil)
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"message": err.Error()})
			return
		}
		s.mu.Lock()
		s.boxes[id] = ws
		s.mu.Unlock()
		writeJSON(w, http.StatusAccepted, map[string]any{"id": id, "status": map[string]string{"state": "Pending"}, "metadata": req.Metadata})
	case len(rest) == 1 && r.Method == http.MethodGet:
		if s.box(rest[0]) == nil {
			writeJSON(w, http.StatusNotFound, map[string]string{"message": "no such sandbox"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": rest[0], "status": map[string]string{"state": "Running"}})
	case len(rest) == 1 && r.Method == http.MethodDelete:
		s.mu.Lock()
		_, ok := s.boxes[rest[0]]
		delete(s.boxes, rest[0])
		s.mu.Unlock()
		if !ok {
			writeJSON(w, http.StatusNotFound, map[string]string{"message": "no such sandbox"})
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case len(rest) == 3 && rest[1] == "endpoints" && rest[2] == "44772":
		writeJSON(w, http.StatusOK, map[string]string{"endpoint": s.srv.Listener.Addr().String() + "/exec/" + rest[0]})
	default:
		http.NotFound(w, r)
	}
}

// inside maps a path of the sandbox to its workspace directory; the test
// service serves /workspace only.
func inside(ws sandbox.Workspace, p string) (string, bool) {
	rel, ok := strings.CutPrefix(p, "/workspace/")
	if !ok {
		return "", false
	}
	full, err := ws.Resolve(rel)
	return full, err == nil
}

func (s *service) execd(w http.ResponseWriter, r *http.Request, ws sandbox.Workspace, op string) {
	switch {
	case op == "command" && r.Method == http.MethodPost:
		var req struct {
			Command string `json:"command"`
			Cwd     string `json:"cwd"`
			Timeout int64  `json:"timeout"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Cwd != "/workspace" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"message": "bad command"})
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		ev := func(v map[string]any) {
			b, _ := json.Marshal(v)
			fmt.Fprintf(w, "data: %s\n\n", b)
		}
		ev(map[string]any{"type": "init", "text": "cmd-1"})
		res, err := ws.Run(r.Context(), sandbox.Cmd{Args: []string{"sh", "-c", req.Command}, Timeout: time.Duration(req.Timeout) * time.Millisecond})
		if err != nil {
			ev(map[string]any{"type": "error", "error": map[string]string{"ename": "RuntimeError", "evalue": err.Error()}})
			return
		}
		if res.Stdout != "" {
			ev(map[string]any{"type": "stdout", "text": res.Stdout})
		}
		if res.Stderr != "" {
			ev(map[string]any{"type": "stderr", "text": res.Stderr})
		}
		if res.ExitCode != 0 {
			ev(map[string]any{"type": "error", "error": map[string]string{"ename": "CommandExecError", "evalue": strconv.Itoa(res.ExitCode)}})
		}
		ev(map[string]any{"type": "execution_complete", "execution_time": res.Duration.Milliseconds()})
	case op == "files/search" && r.Method == http.MethodGet:
		if r.URL.Query().Get("path") != "/workspace" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"message": "bad path"})
			return
		}
		out := []map[string]any{}
		err := filepath.WalkDir(ws.Dir(), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(ws.Dir(), p)
			if rel == ".git" { // the test service's own repository
				return filepath.SkipDir
			}
			if !d.Type().IsRegular() {
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			mode, _ := strconv.Atoi(strconv.FormatUint(uint64(fi.Mode().Perm()), 8))
			out = append(out, map[string]any{"path": "/workspace/" + rel, "size": fi.Size(), "modified_at": fi.ModTime(),
				"created_at": fi.ModTime(), "owner": "u", "group": "g", "mode": mode})
			return nil
		})
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"message": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, out)
	case op == "files/upload" && r.Method == http.MethodPost:
		mr, err := r.MultipartReader()
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"message": err.Error()})
			return
		}
		var meta struct {
			Path string `json:"path"`
			Mode int    `json:"mode"`
		}
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"message": err.Error()})
				return
			}
			switch part.FormName() {
			case "metadata":
				if err := json.NewDecoder(part).Decode(&meta); err != nil {
					writeJSON(w, http.StatusBadRequest, map[string]string{"message": err.Error()})
					return
				}
			case "file":
				if err := writeUpload(ws, meta.Path, meta.Mode, part); err != nil {
					writeJSON(w, http.StatusBadRequest, map[string]string{"message": err.Error()})
					return
				}
			}
		}
		w.WriteHeader(http.StatusOK)
	case op == "files/download" && r.Method == http.MethodGet:
		full, ok := inside(ws, r.URL.Query().Get("path"))
		if !ok {
			writeJSON(w, http.StatusBadRequest, map[string]string{"message": "bad path"})
			return
		}
		http.ServeFile(w, r, full)
	case op == "files" && r.Method == http.MethodDelete:
		for _, p := range r.URL.Query()["path"] {
			full, ok := inside(ws, p)
			if !ok {
				writeJSON(w, http.StatusBadRequest, map[string]string{"message": "bad path"})
				return
			}
			_ = os.Remove(full)
		}
		w.WriteHeader(http.StatusOK)
	default:
		http.NotFound(w, r)
	}
}

func writeUpload(ws sandbox.Workspace, p string, mode int, body io.Reader) error {
	full, ok := inside(ws, p)
	if !ok {
		return fmt.Errorf("bad path %q", p)
	}
	if err := os.MkdirAll(filepath.Dir(full), 0o777); err != nil {
		return err
	}
	perm, err := strconv.ParseUint(strconv.Itoa(mode), 8, 32)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(full, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, body); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	// The sandbox's user is not the service's: files are theirs to write.
	return os.Chmod(full, fs.FileMode(perm)|0o666)
}

// newRemote returns the remote backend of the runner, speaking to s.
func newRemote(t *testing.T, s *service, opts ...func(*sandbox.Config, *sandbox.Remote)) *sandbox.Local {
	t.Helper()
	cfg := sandbox.DefaultConfig()
	cfg.Root = t.TempDir()
	cfg.Limits.Timeout = 20 * time.Second
	cfg.Limits.Output = 64 << 10
	rc := sandbox.DefaultRemote()
	rc.URL, rc.Key, rc.Image = s.srv.URL, testKey, "rath-test"
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
	uploads := s.count("POST /exec/files/upload")
	res = run(t, ws, sh("cat a.txt; ls sub | wc -l"))
	if res.ExitCode != 0 || res.Stdout != "edited\n0\n" {
		t.Errorf("got %+v", res)
	}
	if got := s.count("POST /exec/files/upload") - uploads; got != 1 {
		t.Errorf("%d upload requests for one changed file", got)
	}
	// Nothing changed on either side: nothing is sent, nothing comes back.
	uploads, downloads := s.count("POST /exec/files/upload"), s.count("GET /exec/files/download")
	res = run(t, ws, sh("true"))
	if res.ExitCode != 0 {
		t.Errorf("got %+v", res)
	}
	if s.count("POST /exec/files/upload") != uploads {
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
	id, _ := s.only()
	if err := b.Discard(context.Background(), "s1"); err != nil {
		t.Fatal(err)
	}
	if s.box(id) != nil {
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
	id, _ := s.only()
	// The service expires the sandbox behind the runner's back.
	s.mu.Lock()
	delete(s.boxes, id)
	s.mu.Unlock()
	res := run(t, ws, sh("cat one.txt"))
	if res.ExitCode != 0 || res.Stdout != "one\n" {
		t.Errorf("got %+v", res)
	}
	if s.count("POST /v1/sandboxes") != 2 {
		t.Errorf("%d sandboxes created, want 2", s.count("POST /v1/sandboxes"))
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
			writeJSON(w, http.StatusOK, entries)
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
				writeJSON(w, http.StatusOK, []any{entry("/workspace/f", 10)})
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
			writeJSON(w, http.StatusInternalServerError, map[string]string{"message": "failed for key " + testKey})
			return true
		}, want: "500 Internal Server Error"},
		{name: "redirect", hook: func(w http.ResponseWriter, r *http.Request) bool {
			if r.Method != http.MethodPost || r.URL.Path != "/v1/sandboxes" {
				return false
			}
			http.Redirect(w, r, "http://127.0.0.2:1/steal", http.StatusTemporaryRedirect)
			return true
		}, want: "307"},
		{name: "endpoint elsewhere", hook: func(w http.ResponseWriter, r *http.Request) bool {
			if !strings.Contains(r.URL.Path, "/endpoints/") {
				return false
			}
			writeJSON(w, http.StatusOK, map[string]string{"endpoint": "attacker.example:443/exec"})
			return true
		}, want: "not on the service's host"},
		{name: "bad sandbox id", hook: func(w http.ResponseWriter, r *http.Request) bool {
			if r.Method != http.MethodPost || r.URL.Path != "/v1/sandboxes" {
				return false
			}
			writeJSON(w, http.StatusAccepted, map[string]string{"id": "../../admin"})
			return true
		}, want: "unusable sandbox ID"},
		{name: "failed sandbox", hook: func(w http.ResponseWriter, r *http.Request) bool {
			if r.Method != http.MethodGet || !strings.HasPrefix(r.URL.Path, "/v1/sandboxes/") || strings.Contains(r.URL.Path, "endpoints") {
				return false
			}
			writeJSON(w, http.StatusOK, map[string]any{"status": map[string]string{"state": "Failed", "reason": "ImagePullBackOff"}})
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
			s.mu.Lock()
			s.hook = c.hook
			s.mu.Unlock()
			_, err := ws.Run(context.Background(), sh("echo hi"))
			s.mu.Lock()
			s.hook = nil
			s.mu.Unlock()
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
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(s.serve))
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
