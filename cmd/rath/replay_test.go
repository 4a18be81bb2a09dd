package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/replay"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// TestReplayDemo runs the demo once in-process and, against its runtime:
// replays it (every branch reproduced), replays it against a workflow whose
// coder script answers differently (the first divergence is the coder's
// answer in the root), and diffs its first and last branches (the file the
// coder changed is named).
func TestReplayDemo(t *testing.T) {
	run, _ := runDemoForTest(t)
	ctx := context.Background()
	c, err := client.New(run.rt.Conn)
	if err != nil {
		t.Fatal(err)
	}
	orig, err := replay.Read(ctx, c, run.root)
	if err != nil {
		t.Fatal(err)
	}
	url := run.rt.URL

	t.Run("reproduces", func(t *testing.T) {
		r := rath(t, url, "replay", run.root, "--timeout", "30s")
		if r.code != exitOK {
			t.Fatalf("replay: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}
		want := "reproduced: " + itoa(orig.Events()) + " events in " + itoa(len(orig.Branches)) + " branches identical"
		if !strings.Contains(r.stdout, want) {
			t.Errorf("replay printed:\n%s\nwant %q", r.stdout, want)
		}
		// The demo's notes were in memory before its session: the replay
		// seeds them from the original's memory history.
		if !strings.Contains(r.stdout, "1 version seeded from the original's history") {
			t.Errorf("replay printed:\n%s\nwant the recalled notes seeded", r.stdout)
		}
	})

	t.Run("modified script diverges", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "demo")
		if err := os.CopyFS(dir, os.DirFS(filepath.Join("..", "..", demoExample))); err != nil {
			t.Fatal(err)
		}
		script := filepath.Join(dir, "coder.yaml")
		body, err := os.ReadFile(script)
		if err != nil {
			t.Fatal(err)
		}
		const was = "content: Lower-casing the title and replacing its spaces with dashes."
		if !strings.Contains(string(body), was) {
			t.Fatalf("coder.yaml no longer says %q", was)
		}
		os.WriteFile(script, []byte(strings.Replace(string(body), was, "content: Replacing the spaces, nothing else.", 1)), 0o644)

		// Where the original's coder first answered: its first chunk.
		var want uint64
		for _, e := range orig.Root.Events {
			if e.Type == events.TypeChunkAppended && e.Source == replay.SourceWorker && strings.Contains(string(e.Data), `"agent":"coder"`) {
				want = e.Seq
				break
			}
		}
		r := rath(t, url, "--json", "replay", run.root, "--workflow", filepath.Join(dir, "workflow.yaml"), "--timeout", "30s")
		if r.code != exitDiverged {
			t.Fatalf("replay with a modified script: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, exitDiverged, r.stdout, r.stderr)
		}
		var rep struct {
			First *replay.Divergence `json:"first_divergence"`
		}
		decode(t, r.stdout, &rep)
		d := rep.First
		if d == nil || d.Pos != "root" || d.Seq != want || d.What != "differs" || d.Got == nil || d.Got.Type != events.TypeChunkAppended {
			t.Fatalf("first divergence %+v, want the coder's chunk at root seq %d\n%s", d, want, r.stdout)
		}
		if !strings.Contains(d.Diff, "Replacing the spaces, nothing else.") || !strings.Contains(d.Diff, "Lower-casing the title") {
			t.Errorf("diff %q does not show both answers", d.Diff)
		}
		// The text report says the same.
		r = rath(t, url, "replay", run.root, "--workflow", filepath.Join(dir, "workflow.yaml"), "--timeout", "30s")
		t.Log(r.stdout)
		if !strings.Contains(r.stdout, "DIVERGED at branch root") || !strings.Contains(r.stdout, "sequence "+itoa(int(want))) {
			t.Errorf("text report:\n%s", r.stdout)
		}
	})

	t.Run("diff names the changed file", func(t *testing.T) {
		last := orig.Branches[len(orig.Branches)-1]
		for _, b := range orig.Branches {
			if b.Closed() && strings.Contains(string(b.Events[len(b.Events)-1].Data), `"outcome":"accepted"`) {
				last = b
			}
		}
		out := ok(t, url, "diff", run.root, last.ID)
		t.Log(out)
		if !strings.Contains(out, "slug.go") || !strings.Contains(out, "common ancestry: sequences 1..") {
			t.Errorf("diff printed:\n%s", out)
		}
		var d struct {
			Common uint64 `json:"common_seq"`
			Files  []struct {
				File string `json:"file"`
			} `json:"files"`
		}
		decode(t, ok(t, url, "--json", "diff", run.root, last.ID), &d)
		if d.Common != orig.Branches[1].ForkSeq || len(d.Files) == 0 || d.Files[0].File != "slug.go" {
			t.Errorf("diff --json: %+v", d)
		}
	})
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// rath replay --workflow checks the file before it reads the original or
// starts a runtime: nothing listens at the URL, so an attempt would exit 6.
func TestReplayChecksTheWorkflowFirst(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "my.yaml")
	broken := filepath.Join(dir, "broken.yaml")
	if err := os.WriteFile(broken, []byte("name: [unclosed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{missing, broken} {
		r := rath(t, "nats://127.0.0.1:1", "replay", "fix", "--workflow", file)
		if r.code != exitUsage || !strings.Contains(r.stderr, file) {
			t.Errorf("replay --workflow %s: exit %d, stderr %q; want %d naming the file", file, r.code, r.stderr, exitUsage)
		}
	}
}
