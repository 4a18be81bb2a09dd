package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/natstest"
)

// jsSummary is the last line examples/js/watch.mjs prints.
type jsSummary struct {
	Session      string      `json:"session"`
	Status       string      `json:"status"`
	Outcome      string      `json:"outcome"`
	Head         uint64      `json:"head"`
	Events       int         `json:"events"`
	Live         int         `json:"live"`
	Fork         string      `json:"fork"`
	ForkAt       uint64      `json:"fork_at"`
	ForkStatus   string      `json:"fork_status"`
	ForkOutcome  string      `json:"fork_outcome"`
	ForkHead     uint64      `json:"fork_head"`
	ForkParent   string      `json:"fork_parent"`
	ForkSegments []jsSegment `json:"fork_segments"`
	Continuous   bool        `json:"continuous"`
	Forged       int         `json:"forged"`
}

type jsSegment struct {
	Session string `json:"session"`
	From    uint64 `json:"from"`
	To      uint64 `json:"to"`
}

// The JavaScript example (examples/js, on the TypeScript SDK sdk/typescript)
// starts the fix-calc workflow on a real runtime with client.nk,
// follows it live to its close, forks it through the ledger, follows the
// fork through its ancestry to its own close, and reads both states. Node
// and npm are required: without them the test fails, naming the tool
// (scripts/install-sandbox.sh installs them).
func TestJavaScriptClient(t *testing.T) {
	if testing.Short() {
		t.Skip("runs npm ci and node on examples/js")
	}
	node, npm := needTool(t, "node"), needTool(t, "npm")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The example depends on the SDK by path (file:../../sdk/typescript): the
	// SDK is built in a copy of the tree (buildSDK) and the example copied
	// beside it, where npm ci installs exactly package-lock.json, so the
	// source tree gets no node_modules; npm's own cache makes a second run
	// read nothing from the registry.
	example, err := filepath.Abs(filepath.Join("..", "examples", "js"))
	if err != nil {
		t.Fatal(err)
	}
	sdk := buildSDK(ctx, t, npm, node)
	dir := filepath.Join(filepath.Dir(filepath.Dir(sdk)), "examples", "js")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"package.json", "package-lock.json", ".npmrc", "watch.mjs"} {
		b, err := os.ReadFile(filepath.Join(example, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ci := exec.CommandContext(ctx, npm, "ci", "--prefer-offline")
	ci.Dir = dir
	ci.Env = append(os.Environ(), "npm_config_update_notifier=false")
	if out, err := ci.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in a copy of examples/js: %v\n%s", err, out)
	}

	r := start(t)
	// The example runs in the repository root, as a user would, names the
	// workflow as rath start would and packs fix-calc's repository as the
	// workspace seed.
	const id = "js-fix"
	run := exec.CommandContext(ctx, node, filepath.Join(dir, "watch.mjs"),
		"--nats", r.url,
		"--creds", natstest.CredsFile(t, r.url, auth.RoleClient),
		"--workflow", filepath.Join("examples", "fix-calc", "workflow.yaml"),
		"--workspace", filepath.Join("examples", "fix-calc", "repo"),
		"--id", id,
		"--timeout", "180")
	run.Dir = ".."
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	err = run.Run()
	t.Logf("node watch.mjs:\n%s%s", stdout.String(), stderr.String())
	if err != nil {
		t.Fatalf("node watch.mjs: %v", err)
	}

	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var got jsSummary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("the last line is not the summary: %v", err)
	}
	fork := id + "-b"
	if got.Session != id || got.Status != "closed" || got.Outcome != "succeeded" {
		t.Errorf("session %s: %s (%s), want %s closed (succeeded)", got.Session, got.Status, got.Outcome, id)
	}
	if got.Fork != fork || got.ForkStatus != "closed" || got.ForkOutcome != "succeeded" || got.ForkParent != id {
		t.Errorf("fork %s of %s: %s (%s), want %s of %s closed (succeeded)", got.Fork, got.ForkParent, got.ForkStatus, got.ForkOutcome, fork, id)
	}
	if !got.Continuous || got.Forged != 0 {
		t.Errorf("continuous %v, skipped live messages %d: want continuous, none skipped", got.Continuous, got.Forged)
	}
	if got.Live == 0 {
		t.Errorf("no event was shown live: the example did not follow live")
	}

	// What the example saw is what the ledger holds: check it with the Go
	// client.
	st, err := r.c.State(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	fst, err := r.c.State(ctx, fork)
	if err != nil {
		t.Fatal(err)
	}
	if got.Head != st.Seq || uint64(got.Events) != st.Seq || got.ForkHead != fst.Seq {
		t.Errorf("heads: the example saw %s %d (%d events), %s %d; the ledger holds %d, %d", id, got.Head, got.Events, fork, got.ForkHead, st.Seq, fst.Seq)
	}
	if fst.Lineage.Parent != id || fst.Lineage.ForkSeq != got.ForkAt || got.ForkAt == 0 {
		t.Errorf("fork lineage: %s@%d, the example forked at %d", fst.Lineage.Parent, fst.Lineage.ForkSeq, got.ForkAt)
	}
	want := []jsSegment{{id, 1, got.ForkAt}, {fork, got.ForkAt + 1, fst.Seq}}
	if !slices.Equal(got.ForkSegments, want) {
		t.Errorf("the fork's log: segments %v, want %v", got.ForkSegments, want)
	}
	// The transcript shows the catch-up, then the live follow, of both.
	for _, s := range []string{id + ": caught up at seq", fork + ": caught up at seq", "ancestry of " + fork} {
		if !strings.Contains(stdout.String(), s) {
			t.Errorf("the transcript lacks %q", s)
		}
	}
}

// needTool returns the path of a program the test needs, failing the test
// when it is not installed.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed (%v): this test runs examples/js with Node 20 or later and npm; scripts/install-sandbox.sh installs them with apt-get", name, err)
	}
	return p
}
