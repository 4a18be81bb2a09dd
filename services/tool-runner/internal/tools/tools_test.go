package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
	"github.com/openrath/rath/services/tool-runner/internal/tools"
)

// newWorkspace places a workspace seeded with files.
func newWorkspace(t *testing.T, files map[string]string) sandbox.Workspace {
	t.Helper()
	cfg := sandbox.DefaultConfig()
	cfg.Root = t.TempDir()
	cfg.Limits.Timeout = 20 * time.Second
	l, err := sandbox.NewLocal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	for name, content := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ws, err := l.Place(context.Background(), "s1", &sandbox.Seed{Dir: src})
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// call calls a tool that must not fail with a Go error.
func call(t *testing.T, ws sandbox.Workspace, name, args string) tools.Output {
	t.Helper()
	out, err := tools.Call(context.Background(), ws, name, json.RawMessage(args))
	if err != nil {
		t.Fatalf("%s %s: %v", name, args, err)
	}
	return out
}

func args(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSpecs(t *testing.T) {
	t.Parallel()
	specs := tools.Specs()
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
		if s.Description == "" {
			t.Errorf("%s has no description", s.Name)
		}
		var schema struct {
			Type                 string         `json:"type"`
			AdditionalProperties *bool          `json:"additionalProperties"`
			Properties           map[string]any `json:"properties"`
		}
		if err := json.Unmarshal(s.Parameters, &schema); err != nil {
			t.Errorf("%s parameters: %v", s.Name, err)
		}
		if schema.Type != "object" || schema.AdditionalProperties == nil || *schema.AdditionalProperties || len(schema.Properties) == 0 {
			t.Errorf("%s parameters are not a closed object schema: %s", s.Name, s.Parameters)
		}
	}
	if got, want := strings.Join(names, " "), "read_file write_file list_files search apply_patch run validate experiment todo"; got != want {
		t.Errorf("specs %q, want %q", got, want)
	}
}

func TestCallValidatesArguments(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t, map[string]string{"a.txt": "a\n"})
	for _, tc := range []struct {
		tool, args string
		field      string // the field the error must name
	}{
		{"read_file", `{}`, "path"},
		{"read_file", ``, "path"},
		{"read_file", `{"path": 3}`, "path"},
		{"read_file", `{"path": ""}`, "path"},
		{"read_file", `{"path": "a.txt", "offset": 0}`, "offset"},
		{"read_file", `{"path": "a.txt", "limit": "ten"}`, "limit"},
		{"read_file", `{"path": "a.txt", "bogus": 1}`, "bogus"},
		{"read_file", `["a.txt"]`, ""},
		{"read_file", `{"path": `, ""},
		{"write_file", `{"path": "b.txt"}`, "content"},
		{"write_file", `{"content": "x"}`, "path"},
		{"list_files", `{"recursive": "yes"}`, "recursive"},
		{"search", `{}`, "pattern"},
		{"search", `{"pattern": "("}`, "pattern"},
		{"search", `{"pattern": "x", "max_results": 5000}`, "max_results"},
		{"search", `{"pattern": "x", "path": false}`, "path"},
		{"apply_patch", `{"patch": ""}`, "patch"},
		{"apply_patch", `{"patch": "just some text\n"}`, "patch"},
		{"run", `{"command": []}`, "command"},
		{"run", `{"command": "ls -l"}`, "command"},
		{"run", `{"command": [1]}`, "command[0]"},
		{"run", `{"command": [""]}`, "command[0]"},
		{"validate", `{}`, "command"},
		{"validate", `{"command": ["go"], "check": 3}`, "check"},
		{"run", `{"command": ["ls"], "timeout_seconds": 0}`, "timeout_seconds"},
		{"run", `{"command": ["ls"], "timeout_seconds": 1.5}`, "timeout_seconds"},
		{"run", `{"command": ["ls"], "timeout_seconds": 86400}`, "timeout_seconds"},
	} {
		_, err := tools.Call(context.Background(), ws, tc.tool, json.RawMessage(tc.args))
		var ae *tools.ArgError
		if !errors.As(err, &ae) {
			t.Errorf("%s %s: %v, want an *ArgError", tc.tool, tc.args, err)
			continue
		}
		if ae.Tool != tc.tool || ae.Field != tc.field || ae.Reason == "" {
			t.Errorf("%s %s: %#v, want field %q", tc.tool, tc.args, ae, tc.field)
		}
		if tc.field != "" && !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s %s: message %q does not name %q", tc.tool, tc.args, err, tc.field)
		}
	}

	// Optional arguments may be null, as some models send them.
	if out := call(t, ws, "read_file", `{"path": "a.txt", "offset": null, "limit": null}`); out.Result != "a\n" {
		t.Errorf("nulls: %+v", out)
	}
	if _, err := tools.Call(context.Background(), ws, "rm_rf", json.RawMessage(`{}`)); !errors.Is(err, tools.ErrUnknownTool) {
		t.Errorf("unknown tool: %v, want ErrUnknownTool", err)
	}
}

func TestReadWriteList(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t, map[string]string{
		"README.md":   "line 1\nline 2\nline 3\nline 4\n",
		"src/main.go": "package main\n",
		"bin/blob":    "\x00\x01\x02",
	})

	if out := call(t, ws, "read_file", `{"path": "README.md"}`); out.ExitCode != 0 || out.Result != "line 1\nline 2\nline 3\nline 4\n" || out.Truncated {
		t.Errorf("read: %+v", out)
	}
	out := call(t, ws, "read_file", `{"path": "README.md", "offset": 2, "limit": 2}`)
	if !out.Truncated || !strings.HasPrefix(out.Result, "line 2\nline 3\n\n[showing lines 2-3") || !strings.Contains(out.Result, "offset=4") {
		t.Errorf("read a window: %+v", out)
	}
	for _, tc := range []struct{ args, want string }{
		{`{"path": "missing.txt"}`, "no such file"},
		{`{"path": "src"}`, "not a regular file"},
		{`{"path": "bin/blob"}`, "binary file"},
	} {
		if out := call(t, ws, "read_file", tc.args); out.ExitCode == 0 || !strings.Contains(out.Result, tc.want) {
			t.Errorf("read_file %s: %+v, want a failure saying %q", tc.args, out, tc.want)
		}
	}

	out = call(t, ws, "write_file", `{"path": "src/pkg/new.go", "content": "package pkg\n"}`)
	if out.ExitCode != 0 {
		t.Fatalf("write: %+v", out)
	}
	if b, err := os.ReadFile(filepath.Join(ws.Dir(), "src/pkg/new.go")); err != nil || string(b) != "package pkg\n" {
		t.Errorf("written file: %q, %v", b, err)
	}
	if out := call(t, ws, "write_file", `{"path": "src", "content": "x"}`); out.ExitCode == 0 {
		t.Errorf("writing over a directory: %+v", out)
	}

	if out := call(t, ws, "list_files", `{}`); out.Result != "README.md\nbin/\nsrc/" {
		t.Errorf("list: %q", out.Result)
	}
	if out := call(t, ws, "list_files", `{"path": "src", "recursive": true}`); out.Result != "src/main.go\nsrc/pkg/\nsrc/pkg/new.go" {
		t.Errorf("list src recursively: %q", out.Result)
	}
	if out := call(t, ws, "list_files", `{"recursive": true}`); strings.Contains(out.Result, ".git") {
		t.Errorf("recursive list shows .git:\n%s", out.Result)
	}
	if out := call(t, ws, "list_files", `{"path": "nope"}`); out.ExitCode == 0 {
		t.Errorf("list a missing directory: %+v", out)
	}
}

func TestSearch(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t, map[string]string{
		"a.go":     "package a\n\nfunc Alpha() {}\n",
		"b/b.go":   "package b\n\nfunc Beta() { Alpha() }\n",
		"b/blob":   "Alpha\x00",
		"notes.md": "no match here\n",
	})
	if out := call(t, ws, "search", `{"pattern": "Alpha"}`); out.Result != "a.go:3:func Alpha() {}\nb/b.go:3:func Beta() { Alpha() }" {
		t.Errorf("search: %q", out.Result)
	}
	if out := call(t, ws, "search", `{"pattern": "(?i)^PACKAGE", "path": "b"}`); out.Result != "b/b.go:1:package b" {
		t.Errorf("search b: %q", out.Result)
	}
	if out := call(t, ws, "search", `{"pattern": "package", "max_results": 1}`); !out.Truncated || !strings.HasPrefix(out.Result, "a.go:1:package a\n[stopped after 1") {
		t.Errorf("search capped: %+v", out)
	}
	// .git holds "ref: refs/heads/session" in HEAD; it is never searched.
	if out := call(t, ws, "search", `{"pattern": "refs/heads"}`); out.ExitCode != 0 || out.Result != "[no matches]" {
		t.Errorf("search matched inside .git: %+v", out)
	}
}

func TestFileToolsStayInside(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t, map[string]string{"a/b.txt": "b\n"})
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"etc": "/etc", "out": outside, "rel-out": "../../../../../../../" + outside, "gitdir": ".git"} {
		if err := os.Symlink(target, filepath.Join(ws.Dir(), link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{
		"../x", "/etc/passwd", "a/../../x", secret,
		"etc/passwd", "etc/hostname", "out/secret.txt", "out", "rel-out/secret.txt",
		".git/config", ".git", "a/../.git/HEAD", "gitdir/config",
	} {
		for _, tc := range []struct{ tool, args string }{
			{"read_file", args(t, map[string]any{"path": p})},
			{"write_file", args(t, map[string]any{"path": p, "content": "pwned\n"})},
			{"write_file", args(t, map[string]any{"path": p + "/new.txt", "content": "pwned\n"})},
			{"list_files", args(t, map[string]any{"path": p})},
			{"search", args(t, map[string]any{"pattern": ".", "path": p})},
		} {
			out, err := tools.Call(context.Background(), ws, tc.tool, json.RawMessage(tc.args))
			var pe *sandbox.PathError
			if !errors.Is(err, tools.ErrEscape) || !errors.As(err, &pe) {
				t.Errorf("%s %s: %+v, %v; want ErrEscape", tc.tool, tc.args, out, err)
			}
		}
	}
	if b, _ := os.ReadFile(secret); string(b) != "secret\n" {
		t.Errorf("the file outside was changed: %q", b)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Errorf("files were created outside: %v", entries)
	}
	if b, _ := os.ReadFile(filepath.Join(ws.Dir(), ".git/config")); strings.Contains(string(b), "pwned") {
		t.Error(".git/config was written")
	}
}

// naive resolves paths without looking at links, as a buggy backend might.
type naive struct{ sandbox.Workspace }

func (w naive) Resolve(rel string) (string, error) { return filepath.Join(w.Dir(), rel), nil }

// TestOSRootBacksResolve shows that file tools hold even if Resolve misses a
// link (or a command swaps one in after it looked): the I/O goes through
// os.Root, which refuses to follow links out of the workspace.
func TestOSRootBacksResolve(t *testing.T) {
	t.Parallel()
	inner := newWorkspace(t, map[string]string{"a.txt": "a\n"})
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("TOPSECRET\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(inner.Dir(), "out")); err != nil {
		t.Fatal(err)
	}
	ws := naive{inner}
	for _, tc := range []struct{ tool, args string }{
		{"read_file", `{"path": "out/secret.txt"}`},
		{"write_file", `{"path": "out/secret.txt", "content": "pwned"}`},
		{"write_file", `{"path": "out/new/x.txt", "content": "pwned"}`},
		{"list_files", `{"path": "out"}`},
		{"search", `{"pattern": "SECRET", "path": "out"}`},
	} {
		out := call(t, ws, tc.tool, tc.args)
		if out.ExitCode == 0 || strings.Contains(out.Result, "TOPSECRET") {
			t.Errorf("%s %s through a naive Resolve: %+v", tc.tool, tc.args, out)
		}
	}
	if b, _ := os.ReadFile(secret); string(b) != "TOPSECRET\n" {
		t.Errorf("the file outside was changed: %q", b)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Errorf("files were created outside: %v", entries)
	}
}

func TestApplyPatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ws := newWorkspace(t, map[string]string{
		"main.go":    "package main\n\nvar x = 1\n",
		"schema.sql": "-- users\ncreate table users (id int);\n",
		"old.txt":    "remove me\n",
	})
	before, err := ws.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	patch := `diff --git a/main.go b/main.go
--- a/main.go
+++ b/main.go
@@ -1,3 +1,3 @@
 package main
 
-var x = 1
+var x = 2
diff --git a/schema.sql b/schema.sql
--- a/schema.sql
+++ b/schema.sql
@@ -1,2 +1,2 @@
--- users
+-- accounts
 create table users (id int);
diff --git a/old.txt b/old.txt
deleted file mode 100644
--- a/old.txt
+++ /dev/null
@@ -1 +0,0 @@
-remove me
diff --git a/pkg/new.go b/pkg/new.go
new file mode 100644
--- /dev/null
+++ b/pkg/new.go
@@ -0,0 +1 @@
+package pkg
`
	out := call(t, ws, "apply_patch", args(t, map[string]string{"patch": patch}))
	if out.ExitCode != 0 || out.Result != "patched 4 file(s): main.go, old.txt, pkg/new.go, schema.sql" {
		t.Fatalf("apply: %+v", out)
	}
	after, err := ws.Commit(ctx, "patch")
	if err != nil {
		t.Fatal(err)
	}
	diff, err := ws.Diff(ctx, before, after)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"+var x = 2", "+-- accounts", "deleted file mode", "+package pkg"} {
		if !strings.Contains(diff, want) {
			t.Errorf("diff lacks %q:\n%s", want, diff)
		}
	}

	// A patch that does not apply changes nothing and says why.
	out = call(t, ws, "apply_patch", args(t, map[string]string{"patch": "--- a/main.go\n+++ b/main.go\n@@ -1 +1 @@\n-package nope\n+package yes\n"}))
	if out.ExitCode == 0 || !strings.Contains(out.Result, "main.go") {
		t.Errorf("bad patch: %+v", out)
	}
	if head, _ := ws.Commit(ctx, "nothing"); head != after {
		t.Error("a failed patch changed the workspace")
	}
}

func TestApplyPatchStaysInside(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t, map[string]string{"a.txt": "a\n"})
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(ws.Dir(), "out")); err != nil {
		t.Fatal(err)
	}
	create := func(path string) string {
		return "--- /dev/null\n+++ " + path + "\n@@ -0,0 +1 @@\n+pwned\n"
	}
	for name, patch := range map[string]string{
		"dot-dot":          create("b/../../escaped.txt"),
		"dot-dot-git":      "diff --git a/../x b/../x\nnew file mode 100644\n--- /dev/null\n+++ b/../x\n@@ -0,0 +1 @@\n+pwned\n",
		"absolute":         create("/tmp/escaped.txt"),
		"git dir":          create("b/.git/hooks/pre-commit"),
		"git config":       "--- a/.git/config\n+++ b/.git/config\n@@ -1 +1 @@\n-[core]\n+[core]\n",
		"through symlink":  create("b/out/escaped.txt"),
		"rename outside":   "diff --git a/a.txt b/../a.txt\nsimilarity index 100%\nrename from a.txt\nrename to ../a.txt\n",
		"quoted dot-dot":   create(`"b/../\145scaped.txt"`),
		"second file only": create("b/fine.txt") + create("b/../../escaped.txt"),
	} {
		out, err := tools.Call(context.Background(), ws, "apply_patch", json.RawMessage(args(t, map[string]string{"patch": patch})))
		if !errors.Is(err, tools.ErrEscape) {
			t.Errorf("%s: %+v, %v; want ErrEscape", name, out, err)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("files were created outside: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(ws.Dir(), "fine.txt")); err == nil {
		t.Error("part of a refused patch was applied")
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t, map[string]string{"a.txt": "a\n"})
	out := call(t, ws, "run", `{"command": ["sh", "-c", "cat a.txt; echo oops >&2; exit 2"]}`)
	if out.ExitCode != 2 || out.Stdout != "a\n" || out.Stderr != "oops\n" {
		t.Errorf("run: %+v", out)
	}
	if want := regexp.MustCompile(`^exit code 2\nlimits: timeout=20s cpu=600s nofile=4096 fsize=1073741824B as=8589934592B[^\n]*\n--- stdout ---\na\n--- stderr ---\noops\n$`); !want.MatchString(out.Result) {
		t.Errorf("result %q, want %s", out.Result, want)
	}
	out = call(t, ws, "run", `{"command": ["sleep", "100"], "timeout_seconds": 1}`)
	if out.ExitCode == 0 || !strings.Contains(out.Result, "timed out") {
		t.Errorf("timeout: %+v", out)
	}
	out = call(t, ws, "run", `{"command": ["no-such-program"]}`)
	if out.ExitCode != 127 || !strings.Contains(out.Result, "no-such-program") {
		t.Errorf("missing program: %+v", out)
	}
}

// validate runs its command like run; the exit code is the verdict and the
// check name defaults to the command.
func TestValidate(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t, map[string]string{"a.txt": "a\n"})
	for _, tc := range []struct {
		args  string
		exit  int
		check string
	}{
		{`{"command": ["sh", "-c", "exit 0"]}`, 0, "sh -c exit 0"},
		{`{"command": ["sh", "-c", "echo broken; exit 3"], "check": "tests"}`, 3, "tests"},
	} {
		out, err := tools.Call(context.Background(), ws, tools.Validate, json.RawMessage(tc.args))
		if err != nil {
			t.Fatalf("%s: %v", tc.args, err)
		}
		if out.ExitCode != tc.exit || !strings.Contains(out.Result, fmt.Sprintf("exit code %d", tc.exit)) {
			t.Fatalf("%s: exit %d, result %q", tc.args, out.ExitCode, out.Result)
		}
		if got := tools.CheckName(json.RawMessage(tc.args)); got != tc.check {
			t.Fatalf("%s: check %q, want %q", tc.args, got, tc.check)
		}
	}
}

// TestFileToolsRefuseFIFOs: a FIFO a command left in the workspace is
// refused at once; opening it used to block the runner forever.
func TestFileToolsRefuseFIFOs(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t, map[string]string{"a.txt": "a\n"})
	if err := syscall.Mkfifo(filepath.Join(ws.Dir(), "p"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ tool, args string }{
		{"read_file", `{"path": "p"}`},
		{"write_file", `{"path": "p", "content": "x"}`},
	} {
		out := call(t, ws, c.tool, c.args)
		if out.ExitCode == 0 || !strings.Contains(out.Result, "regular file") {
			t.Errorf("%s on a FIFO: %+v", c.tool, out)
		}
	}
	// A regular file is still written whole, over a longer one.
	call(t, ws, "write_file", `{"path": "a.txt", "content": "longer content\n"}`)
	call(t, ws, "write_file", `{"path": "a.txt", "content": "b\n"}`)
	if b, err := os.ReadFile(filepath.Join(ws.Dir(), "a.txt")); err != nil || string(b) != "b\n" {
		t.Errorf("a.txt = %q, %v", b, err)
	}
}
