package service_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// A session's workspace seed is content the client packed and stored: the
// runner reads it from the blob store and nothing else. A label naming a
// path on the runner's machine — its data directory with the ledger's key
// and the admin credentials, another session's workspace, the host's
// files — fails the call with a reason naming the label, and nothing of
// that path reaches the session (issue 29's first finding, as a test).
func TestWorkspaceSeedIsContentNeverAPath(t *testing.T) {
	r := setupWith(t, backendWorkflow(""), localBackend)
	ctx := context.Background()

	// What a tenant would try to read through its seed: the runner's own
	// working directory holds a data directory, as rath up's does.
	secret := "-----BEGIN PRIVATE KEY----- not for tenants"
	t.Chdir(t.TempDir())
	if err := os.MkdirAll(filepath.Join(".rath", "data", "keys"), 0o700); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(".rath", "data", "keys", "ledger.key"), secret)
	abs, err := filepath.Abs(filepath.Join(".rath", "data"))
	if err != nil {
		t.Fatal(err)
	}
	for i, label := range []string{".rath/data", abs, "../../../../etc", "ws/.bwrap/other", ".",
		"sha256:" + strings.Repeat("0", 64), "sha256:../../.rath/data", "SHA256:" + strings.Repeat("a", 64)} {
		id := "path-" + string(rune('a'+i))
		r.startWith(t, id, map[string]string{client.LabelWorkspace: label})
		done, failed := r.call(t, id, "c1", "plain", "list_files", `{}`)
		if done != nil {
			t.Fatalf("workspace %q: the call ran: %q", label, done.Result)
		}
		if !strings.Contains(failed.Error, "workspace seed") || strings.Contains(failed.Error, secret) {
			t.Errorf("workspace %q: the call failed with %q, want a reason naming the workspace seed", label, failed.Error)
		}
		if p := r.placements(t, id); len(p) != 0 {
			t.Errorf("workspace %q: placed %+v", label, p[0])
		}
	}

	// A hostile archive fails the same way, and writes nothing outside the
	// workspace root.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "../../escaped", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	bad, err := r.c.PutBlob(ctx, buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	r.startWith(t, "hostile", map[string]string{client.LabelWorkspace: bad})
	if _, failed := r.call(t, "hostile", "c1", "plain", "list_files", `{}`); failed == nil || !strings.Contains(failed.Error, "outside the workspace") {
		t.Errorf("a seed with ../../escaped: %+v, want a failure naming the entry", failed)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(r.workspace), "escaped")); err == nil {
		t.Error("the seed wrote outside the workspace root")
	}

	// A seed the client packed is the workspace's first commit, and the
	// placement says what it came from.
	src := t.TempDir()
	write(t, filepath.Join(src, "README"), "seeded\n")
	start := events.SessionStarted{Workflow: "boxes", WorkflowRef: r.ref}
	if err := r.c.SeedWorkspace(ctx, src, &start); err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Start(ctx, "good", start); err != nil {
		t.Fatal(err)
	}
	read := r.ok(t, "good", "c1", "plain", "read_file", `{"path":"README"}`)
	if read.Result != "seeded\n" {
		t.Errorf("read_file README = %q", read.Result)
	}
	p := r.placements(t, "good")
	if len(p) != 1 || !strings.Contains(p[0].Reason, "seeded from "+src+" ("+start.Labels[client.LabelWorkspace]+")") {
		t.Errorf("placements %+v, want one seeded from %s", p, src)
	}
}

// The second layer (ADR 0031): even a command that names the runtime's
// files by absolute path reads none of them. Under bwrap the data
// directory, the signing key, the credentials (the test server's own, the
// runner's among them), the runner's workspace root and another session's
// workspace are not in the command's mount namespace.
func TestSandboxCannotReachRuntimeFiles(t *testing.T) {
	needBwrap(t)
	data := t.TempDir()
	secrets := map[string]string{
		filepath.Join(data, "keys", "ledger.key"): "-----BEGIN PRIVATE KEY----- ledger 4242",
		filepath.Join(data, "creds", "admin.nk"):  "-----BEGIN USER NKEY SEED----- admin 4242",
	}
	for path, body := range secrets {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := setupWith(t, backendWorkflow("bwrap"), sandboxUIDs)
	r.startWith(t, "other", nil)
	r.ok(t, "other", "w1", "plain", "write_file", `{"path":"mine.txt","content":"other tenant's 4242"}`)
	other := r.placements(t, "other")[0].Workspace
	r.startWith(t, "thief", nil)
	paths := []string{data, other, filepath.Join(other, "mine.txt")}
	for path := range secrets {
		paths = append(paths, path)
	}
	if creds := os.Getenv("RATH_CREDS"); creds != "" {
		paths = append(paths, creds)
	}
	for i, p := range paths {
		args, err := json.Marshal(map[string]any{"command": []string{"sh", "-c", `cat "$1" 2>&1; ls -la "$1" 2>&1; echo end`, "sh", p}})
		if err != nil {
			t.Fatal(err)
		}
		done := r.ok(t, "thief", fmt.Sprintf("c%d", i), "plain", "run", string(args))
		if strings.Contains(done.Result, "4242") || !strings.Contains(done.Result, "No such file") {
			t.Errorf("%s from a bwrap sandbox: %q, want it absent", p, done.Result)
		}
	}
	// The workspace root is there only as the path to the thief's own
	// workspace: no other session's is under it.
	args, err := json.Marshal(map[string]any{"command": []string{"sh", "-c", `ls -laR "$1" 2>&1`, "sh", r.workspace}})
	if err != nil {
		t.Fatal(err)
	}
	done := r.ok(t, "thief", "root", "plain", "run", string(args))
	if strings.Contains(done.Result, filepath.Base(other)) || strings.Contains(done.Result, "mine.txt") || !strings.Contains(done.Result, "thief") {
		t.Errorf("the workspace root from a bwrap sandbox: %q, want only the thief's own workspace", done.Result)
	}
}
