// Package sandboxtest is a remote sandbox service for tests: the subset of
// OpenSandbox's lifecycle and execd APIs the remote backend speaks (ADR
// 0041), whose sandboxes are workspaces of a real isolating backend.
package sandboxtest

import (
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

// Service is a remote sandbox service for tests: the subset of
// OpenSandbox's lifecycle and execd APIs the remote backend speaks (ADR
// 0041), on top of the real bwrap backend, so that commands really run
// isolated. Its sandboxes' /workspace is a bwrap workspace's directory.
type Service struct {
	t     testing.TB
	key   string
	bwrap *sandbox.Local
	// Srv is the service's HTTP server: Srv.URL is its base URL.
	Srv   *httptest.Server
	mu    sync.Mutex
	n     int
	boxes map[string]sandbox.Workspace
	// hook, when set, may answer a request itself (returning true): the
	// tests' hostile services.
	hook func(w http.ResponseWriter, r *http.Request) bool
	// calls counts requests by method and path pattern.
	calls map[string]int
}

// NewService starts a service whose sandboxes are workspaces of bwrap, an
// isolating backend, and which accepts key only; it stops with the test.
func NewService(t testing.TB, bwrap *sandbox.Local, key string) *Service {
	t.Helper()
	s := &Service{t: t, key: key, bwrap: bwrap, boxes: map[string]sandbox.Workspace{}, calls: map[string]int{}}
	s.Srv = httptest.NewServer(s)
	t.Cleanup(s.Srv.Close)
	return s
}

// NewHandler is the service's handler alone, for a program that serves it
// itself (the bench's sandbox service: sandboxtest/serve).
func NewHandler(bwrap *sandbox.Local, key string) http.Handler {
	return &Service{key: key, bwrap: bwrap, boxes: map[string]sandbox.Workspace{}, calls: map[string]int{}}
}

// SetHook sets (nil: removes) a hook that may answer requests itself.
func (s *Service) SetHook(h func(w http.ResponseWriter, r *http.Request) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hook = h
}

// Count is how many requests of one kind the service answered: "GET
// /v1/sandboxes", "POST /exec/files/upload" (execd paths without the
// sandbox).
func (s *Service) Count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[key]
}

// Box is the workspace behind a sandbox ID, or nil.
func (s *Service) Box(id string) sandbox.Workspace {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.boxes[id]
}

// Only returns the one sandbox the service holds, and fails the test if
// it holds another number.
func (s *Service) Only() (string, sandbox.Workspace) {
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

// WriteJSON answers v as JSON with code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// ServeHTTP answers one request of the API.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("OPEN-SANDBOX-API-KEY") != s.key {
		WriteJSON(w, http.StatusUnauthorized, map[string]string{"code": "UNAUTHORIZED", "message": "bad key"})
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
		ws := s.Box(parts[1])
		if ws == nil {
			WriteJSON(w, http.StatusNotFound, map[string]string{"message": "no such sandbox"})
			return
		}
		s.execd(w, r, ws, strings.Join(parts[2:], "/"))
	default:
		http.NotFound(w, r)
	}
}

func (s *Service) lifecycle(w http.ResponseWriter, r *http.Request, rest []string) {
	switch {
	case len(rest) == 0 && r.Method == http.MethodGet:
		WriteJSON(w, http.StatusOK, map[string]any{"items": []any{}})
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
			WriteJSON(w, http.StatusBadRequest, map[string]string{"message": "bad request"})
			return
		}
		s.mu.Lock()
		s.n++
		id := fmt.Sprintf("sbx-%d", s.n)
		s.mu.Unlock()
		ws, err := s.bwrap.Place(r.Context(), "box"+strconv.Itoa(s.n), nil)
		if err != nil {
			WriteJSON(w, http.StatusInternalServerError, map[string]string{"message": err.Error()})
			return
		}
		s.mu.Lock()
		s.boxes[id] = ws
		s.mu.Unlock()
		WriteJSON(w, http.StatusAccepted, map[string]any{"id": id, "status": map[string]string{"state": "Pending"}, "metadata": req.Metadata})
	case len(rest) == 1 && r.Method == http.MethodGet:
		if s.Box(rest[0]) == nil {
			WriteJSON(w, http.StatusNotFound, map[string]string{"message": "no such sandbox"})
			return
		}
		WriteJSON(w, http.StatusOK, map[string]any{"id": rest[0], "status": map[string]string{"state": "Running"}})
	case len(rest) == 1 && r.Method == http.MethodDelete:
		s.mu.Lock()
		_, ok := s.boxes[rest[0]]
		delete(s.boxes, rest[0])
		s.mu.Unlock()
		if !ok {
			WriteJSON(w, http.StatusNotFound, map[string]string{"message": "no such sandbox"})
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case len(rest) == 3 && rest[1] == "endpoints" && rest[2] == "44772":
		WriteJSON(w, http.StatusOK, map[string]string{"endpoint": r.Host + "/exec/" + rest[0]})
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

func (s *Service) execd(w http.ResponseWriter, r *http.Request, ws sandbox.Workspace, op string) {
	switch {
	case op == "command" && r.Method == http.MethodPost:
		var req struct {
			Command string `json:"command"`
			Cwd     string `json:"cwd"`
			Timeout int64  `json:"timeout"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Cwd != "/workspace" {
			WriteJSON(w, http.StatusBadRequest, map[string]string{"message": "bad command"})
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
			WriteJSON(w, http.StatusBadRequest, map[string]string{"message": "bad path"})
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
			WriteJSON(w, http.StatusInternalServerError, map[string]string{"message": err.Error()})
			return
		}
		WriteJSON(w, http.StatusOK, out)
	case op == "files/upload" && r.Method == http.MethodPost:
		mr, err := r.MultipartReader()
		if err != nil {
			WriteJSON(w, http.StatusBadRequest, map[string]string{"message": err.Error()})
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
				WriteJSON(w, http.StatusBadRequest, map[string]string{"message": err.Error()})
				return
			}
			switch part.FormName() {
			case "metadata":
				if err := json.NewDecoder(part).Decode(&meta); err != nil {
					WriteJSON(w, http.StatusBadRequest, map[string]string{"message": err.Error()})
					return
				}
			case "file":
				if err := writeUpload(ws, meta.Path, meta.Mode, part); err != nil {
					WriteJSON(w, http.StatusBadRequest, map[string]string{"message": err.Error()})
					return
				}
			}
		}
		w.WriteHeader(http.StatusOK)
	case op == "files/download" && r.Method == http.MethodGet:
		full, ok := inside(ws, r.URL.Query().Get("path"))
		if !ok {
			WriteJSON(w, http.StatusBadRequest, map[string]string{"message": "bad path"})
			return
		}
		http.ServeFile(w, r, full)
	case op == "files" && r.Method == http.MethodDelete:
		for _, p := range r.URL.Query()["path"] {
			full, ok := inside(ws, p)
			if !ok {
				WriteJSON(w, http.StatusBadRequest, map[string]string{"message": "bad path"})
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

// Expire deletes a sandbox behind its user's back, as a service does when
// its time to live ends.
func (s *Service) Expire(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.boxes, id)
}
