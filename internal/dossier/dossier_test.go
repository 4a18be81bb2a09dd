package dossier_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/openrath/rath/internal/dossier"
	dt "github.com/openrath/rath/internal/dossier/dossiertest"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/services/session-ledger/service"
)

// ledger runs the session ledger on a real embedded JetStream.
func ledger(t *testing.T) *client.Client {
	t.Helper()
	_, nc := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- service.Run(ctx, nc, service.ConfigIn(t.TempDir()), slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ledger: %v", err)
		}
	})
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// exported builds the test tree, and its dossier written to a directory.
func exported(t *testing.T) (*dossier.Dossier, string, map[string]string) {
	t.Helper()
	c := ledger(t)
	ids := dt.Tree(t, c)
	d, err := dossier.Build(context.Background(), c, dt.Accepted, dossier.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := d.Write(dir); err != nil {
		t.Fatal(err)
	}
	return d, dir, ids
}

func TestDossierContents(t *testing.T) {
	d, dir, ids := exported(t)

	if d.Root != dt.Root || d.Session != dt.Accepted || d.Task != "make TestAdd pass <calc & co>" || d.Workflow == nil || d.Workflow.Name != "fix-calc" {
		t.Errorf("root %s, session %s, task %q, workflow %+v", d.Root, d.Session, d.Task, d.Workflow)
	}
	if d.Environment.GoVersion == "" || d.Environment.NATSServerVersion == "" {
		t.Errorf("environment %+v", d.Environment)
	}
	order := []string{}
	verdicts := map[string]dossier.Branch{}
	for _, b := range d.Branches {
		order = append(order, b.ID)
		verdicts[b.ID] = b
	}
	if strings.Join(order, ",") != "fix,fix-b,fix-c" {
		t.Errorf("branches %v, want root first then forks by fork point", order)
	}
	root, acc, sib := verdicts[dt.Root], verdicts[dt.Accepted], verdicts[dt.Sibling]
	if root.Verdict != dossier.VerdictRejected || !strings.Contains(root.VerdictReason, "TestAdd still fails") || !root.OnAcceptedPath {
		t.Errorf("root: %s %q on path %v; want rejected by the failed validation, on the accepted path", root.Verdict, root.VerdictReason, root.OnAcceptedPath)
	}
	if acc.Verdict != dossier.VerdictAccepted || acc.Parent != dt.Root || acc.ForkSeq != dt.ForkSeq || acc.FirstSeq != dt.ForkSeq+1 || acc.Head.Seq != dt.AcceptedCloseSeq {
		t.Errorf("accepted: %+v", acc)
	}
	if sib.Verdict != dossier.VerdictOpen || sib.OnAcceptedPath || len(sib.MergedInto) != 1 || sib.MergedInto[0].Target != dt.Accepted {
		t.Errorf("sibling: verdict %s, on path %v, merged into %+v", sib.Verdict, sib.OnAcceptedPath, sib.MergedInto)
	}
	if len(acc.Merges) != 1 || acc.Merges[0].Source != dt.Sibling || acc.Merges[0].Events != 3 {
		t.Errorf("accepted merges %+v, want the sibling's 3 own events", acc.Merges)
	}
	if root.Head.Seq != 19 || root.Status != "closed" || root.Outcome != "superseded" {
		t.Errorf("root head %d status %s outcome %s", root.Head.Seq, root.Status, root.Outcome)
	}
	// Who acted: the tree was appended by rath up's client, default/client.
	if root.Tenant != "default" || len(root.Actors) != 1 || root.Actors[0] != (dossier.ActorCount{Actor: "default/client", Events: 19}) {
		t.Errorf("root tenant %q, actors %+v; want default, default/client 19", root.Tenant, root.Actors)
	}
	acts := map[string]dossier.Act{}
	for _, a := range d.Acts {
		acts[a.Branch+" "+a.What] = a
	}
	if a, ok := acts[dt.Root+" started the session"]; !ok || a.Seq != 1 || a.Actor != "default/client" || a.Detail != d.Task {
		t.Errorf("acts %+v: want the root's start by default/client", d.Acts)
	}
	if a, ok := acts[dt.Accepted+" closed (succeeded)"]; !ok || a.Seq != dt.AcceptedCloseSeq || a.Actor != "default/client" {
		t.Errorf("acts %+v: want the accepted branch's close by default/client", d.Acts)
	}

	f := d.Final
	if f == nil || f.Branch != dt.Accepted || f.Outcome != "succeeded" || f.Close.Seq != dt.AcceptedCloseSeq || f.Close.EventID != ids["close"] ||
		!f.Validated || f.Validation == nil || f.Validation.Validator != "tests" || f.Validation.EventID != ids["validation-passed"] {
		t.Fatalf("final %+v", f)
	}

	// Usage: each model call once, in the branch that stored it.
	tot := d.Usage.Total
	if tot.Total != (session.Tokens{In: 657, Out: 65, Calls: 4}) {
		t.Errorf("tree total %+v, want in 657 out 65 calls 4", tot.Total)
	}
	want := map[string]session.Tokens{"researcher": {In: 100, Out: 10, Calls: 1}, "coder": {In: 507, Out: 50, Calls: 2}, "explorer": {In: 50, Out: 5, Calls: 1}}
	for agent, w := range want {
		if tot.ByAgent[agent] != w {
			t.Errorf("tree usage of %s %+v, want %+v", agent, tot.ByAgent[agent], w)
		}
	}
	if m := tot.ByModel["scripted/m1"]; m != (session.Tokens{In: 600, Out: 60, Calls: 3}) {
		t.Errorf("usage of scripted/m1 %+v", m)
	}
	if b := d.Usage.ByBranch[dt.Accepted].Total; b != (session.Tokens{In: 307, Out: 30, Calls: 1}) {
		t.Errorf("fork's own usage %+v, want only its own events (the inherited research turn belongs to the root)", b)
	}
	p := d.Usage.AcceptedPath
	if p == nil || p.Usage.Total != (session.Tokens{In: 407, Out: 40, Calls: 2}) ||
		p.Usage.ByAgent["researcher"] != (session.Tokens{In: 100, Out: 10, Calls: 1}) ||
		p.Usage.ByAgent["coder"] != (session.Tokens{In: 307, Out: 30, Calls: 1}) ||
		p.MergedIn.Total != (session.Tokens{In: 50, Out: 5, Calls: 1}) {
		t.Errorf("accepted path usage %+v", p)
	}
	if len(p.Segments) != 2 || p.Segments[0].Session != dt.Root || p.Segments[0].To != dt.ForkSeq || p.Segments[0].Usage.Total.In != 100 {
		t.Errorf("accepted path segments %+v", p.Segments)
	}

	// Tool evidence.
	if len(d.ToolCalls) != 3 {
		t.Fatalf("%d tool calls, want 3: %+v", len(d.ToolCalls), d.ToolCalls)
	}
	c1, c2, c3 := d.ToolCalls[0], d.ToolCalls[1], d.ToolCalls[2]
	if c1.Branch != dt.Root || c1.CallID != "c1" || c1.Diff != dt.BadDiff || len(c1.Files) != 1 || c1.Files[0] != dt.File ||
		c1.Sandbox == nil || c1.Placement == nil || c1.Placement.Seq != 13 || c1.CommitAfter != "bbbb222" || c1.TurnID != "turn-2" {
		t.Errorf("c1 %+v", c1)
	}
	if c2.Branch != dt.Accepted || c2.Status != dossier.ToolCompleted || string(c2.Arguments) != `{"content":"…a + b…","path":"calc.go"}` || len(c2.Seqs) != 3 {
		t.Errorf("c2 %+v", c2)
	}
	if c3.Tool != "run" || c3.ExitCode != 0 || !strings.HasPrefix(c3.Result, "ok") || len(c3.Files) != 0 {
		t.Errorf("c3 %+v", c3)
	}

	// Memory, validations, decisions, turns.
	if len(d.Memory) != 3 || d.Memory[0].Turn != 1 || d.Memory[1].Kind != dossier.MemoryWritten || d.Memory[1].Provenance == nil ||
		d.Memory[1].Provenance.EventIDs[0] != ids["validation-failed"] || d.Memory[2].Turn != 2 || len(d.Memory[2].Items) != 2 {
		t.Errorf("memory %+v", d.Memory)
	}
	if len(d.Validations) != 3 {
		t.Errorf("validations %+v", d.Validations)
	}
	if len(d.Decisions) != 5 || d.Decisions[0].Cause == nil || d.Decisions[0].Cause.Seq != 1 || d.Decisions[1].Cause.Seq != 7 ||
		d.Decisions[0].Router != "" || d.Decisions[1].Router != "triage" {
		t.Errorf("decisions %+v", d.Decisions)
	}
	if len(d.Turns) != 3 || d.Turns[2].Number != 2 || d.Turns[2].Branch != dt.Accepted || d.Turns[0].Answer != "Add subtracts; it should add." {
		t.Errorf("turns %+v", d.Turns)
	}

	// The files.
	matchesSchema(t, dir)
	// The placements say local isolated nothing (they were recorded before
	// placements said their isolation).
	if len(d.Sandboxes) != 2 {
		t.Fatalf("sandboxes %+v", d.Sandboxes)
	}
	for _, p := range d.Sandboxes {
		if p.Backend != "local" || !p.Development || p.Isolation != events.IsolationNone || p.From != nil {
			t.Errorf("placement %+v", p)
		}
	}
	md, _ := os.ReadFile(filepath.Join(dir, dossier.FileMarkdown))
	for _, want := range []string{"**Not isolated:** branch root, fork-1@7 ran tools on a development backend (local)", "isolation: **none**: local is a development backend",
		"final answer came from branch **fork-1@7**", "**root** was rejected", "TestAdd still fails", "+\treturn a + b", "## The test result", "ok  \texample/calc", "## Who acted", "- root (tenant default): default/client 19", "root seq 1: default/client started the session"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("dossier.md lacks %q", want)
		}
	}
	html, _ := os.ReadFile(filepath.Join(dir, dossier.FileHTML))
	if !strings.Contains(string(html), "<svg") || strings.Contains(string(html), "http://") && !strings.Contains(string(html), "http://www.w3.org/2000/svg") || strings.Contains(string(html), "<script src") {
		t.Errorf("graph.html is not a self-contained page with an inline SVG")
	}

	// Event files hold the stored bodies exactly: canonical JSON plus the hash.
	for _, b := range d.Branches {
		data, err := os.ReadFile(filepath.Join(dir, b.EventsFile))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
		if len(lines) != b.Events {
			t.Errorf("%s: %d lines, %d events", b.ID, len(lines), b.Events)
		}
		for _, l := range lines {
			i := strings.LastIndex(l, `,"rathhash":"`)
			canon, err := jcs.Transform([]byte(l[:i] + "}"))
			if err != nil || string(canon) != l[:i]+"}" {
				t.Errorf("%s: a line is not the stored body (canonical JSON + hash):\n%s", b.ID, l)
			}
		}
	}
	if !strings.Contains(string(mustRead(t, filepath.Join(dir, "events", "fix.jsonl"))), "<calc & co>") {
		t.Errorf("the start event's task lost its literal <, & (stored bodies are not HTML-escaped)")
	}

	rep, err := dossier.Verify(dir, nil)
	if err != nil || !rep.OK || rep.Branches != 3 || rep.Events != 19+18+3 {
		t.Errorf("verify: %+v, %v", rep, err)
	}
}

// matchesSchema checks the dossier.json written to dir against the
// dossier.schema.json written with it.
func matchesSchema(t *testing.T, dir string) {
	t.Helper()
	comp := jsonschema.NewCompiler()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(mustRead(t, filepath.Join(dir, dossier.FileSchema))))
	if err != nil {
		t.Fatal(err)
	}
	if err := comp.AddResource("dossier.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := comp.Compile("dossier.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(mustRead(t, filepath.Join(dir, dossier.FileJSON))))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Errorf("dossier.json does not match its schema: %v", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if e.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// editLines rewrites one branch's event file.
func editLines(t *testing.T, dir, branch string, edit func([]string) []string) {
	t.Helper()
	p := filepath.Join(dir, "events", branch+".jsonl")
	lines := strings.Split(strings.TrimSuffix(string(mustRead(t, p)), "\n"), "\n")
	lines = edit(lines)
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func editJSON(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, dossier.FileJSON)
	var m map[string]any
	if err := json.Unmarshal(mustRead(t, p), &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A move and an isolating backend read as such in dossier.md.
func TestMarkdownSandboxes(t *testing.T) {
	d := &dossier.Dossier{Root: "s", Session: "s", Sandboxes: []dossier.Placement{
		{At: dossier.At{Branch: "s", Seq: 3}, Backend: "local", SandboxID: "local-s", Host: "h", Isolation: events.IsolationNone, Development: true},
		{At: dossier.At{Branch: "s", Seq: 9}, Backend: "bwrap", SandboxID: "bwrap-s", Host: "h", Isolation: "bwrap: namespaces",
			From: &events.Sandbox{Backend: "local", SandboxID: "local-s"}},
	}, Branches: []dossier.Branch{{ID: "s"}}}
	md := dossier.Markdown(d)
	for _, want := range []string{
		"seq 9 · sandbox moved from local local-s: bwrap bwrap-s on h",
		"isolation: bwrap: namespaces",
		"| s | 9 | bwrap | bwrap-s | local local-s | bwrap: namespaces |",
		"**Not isolated:** branch s ran tools on a development backend",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("dossier.md lacks %q:\n%s", want, md)
		}
	}
	d.Sandboxes = d.Sandboxes[1:]
	if md := dossier.Markdown(d); strings.Contains(md, "Not isolated") {
		t.Errorf("an isolated tree is said not to be:\n%s", md)
	}
}

// A call its caller ran reads as such: no placement of Rath's, and in
// dossier.md run by the caller, outside Rath's sandbox, even where a
// placement is in force and the caller's result names a sandbox.
func TestCallerRunCalls(t *testing.T) {
	c := ledger(t)
	ctx := context.Background()
	if _, err := c.Start(ctx, "gw", events.SessionStarted{Task: "answer"}); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []any{
		&events.SandboxPlaced{Backend: "bwrap", SandboxID: "bwrap-gw", Isolation: "bwrap: namespaces"},
		&events.ToolRequested{CallID: "rath-1", Tool: "run", Agent: "planner", Arguments: json.RawMessage(`{"command":["ls"]}`)},
		&events.ToolCompleted{CallID: "rath-1", Tool: "run", Attempt: 1, Result: "a.go", DurationMS: 5, Sandbox: &events.Sandbox{Backend: "bwrap", SandboxID: "bwrap-gw"}},
		&events.ToolRequested{CallID: "mine-1", Tool: "lookup", Agent: "planner", Arguments: json.RawMessage(`{"q":"x"}`), Runner: events.RunnerCaller},
		&events.ToolCompleted{CallID: "mine-1", Tool: "lookup", Result: "found", DurationMS: 30, Sandbox: &events.Sandbox{Backend: "docker", SandboxID: "theirs"}},
		&events.ToolRequested{CallID: "mine-2", Tool: "lookup", Agent: "planner", Runner: events.RunnerCaller},
	} {
		if _, err := c.Emit(ctx, "gw", ev); err != nil {
			t.Fatal(err)
		}
	}
	d, err := dossier.Build(ctx, c, "gw", dossier.Options{})
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]dossier.ToolCall{}
	for _, tc := range d.ToolCalls {
		calls[tc.CallID] = tc
	}
	if tc := calls["rath-1"]; tc.Runner != "" || tc.Placement == nil {
		t.Errorf("Rath's call: %+v", tc)
	}
	if tc := calls["mine-1"]; tc.Runner != events.RunnerCaller || tc.Placement != nil || tc.Status != dossier.ToolCompleted {
		t.Errorf("the caller's completed call: %+v", tc)
	}
	if tc := calls["mine-2"]; tc.Runner != events.RunnerCaller || tc.Placement != nil || tc.Status != dossier.ToolRequested {
		t.Errorf("the caller's pending call: %+v", tc)
	}
	md := dossier.Markdown(d)
	for _, want := range []string{
		"tool call `rath-1` run by planner, arguments `{\"command\":[\"ls\"]}` → exit 0: “a.go” [sandbox bwrap/bwrap-gw]",
		"tool call `mine-1` lookup by planner, arguments `{\"q\":\"x\"}` → exit 0: “found” [run by the caller, outside Rath's sandbox; the caller reports sandbox docker/theirs]",
		"tool call `mine-2` lookup by planner, arguments - → requested [run by the caller, outside Rath's sandbox]",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("dossier.md lacks %q:\n%s", want, md)
		}
	}
	dir := t.TempDir()
	if err := d.Write(dir); err != nil {
		t.Fatal(err)
	}
	matchesSchema(t, dir)
}

func TestVerifyNamesTampering(t *testing.T) {
	_, dir, _ := exported(t)
	// Own events of fix-b are seqs 8..25: line i holds seq 8+i.
	for _, tc := range []struct {
		name    string
		tamper  func(dir string)
		session string
		seq     uint64
		says    string
	}{
		{"altered body", func(dir string) {
			editLines(t, dir, dt.Accepted, func(l []string) []string {
				l[9] = strings.Replace(l[9], "wrote calc.go", "wrote calx.go", 1) // seq 17, c2 completed
				return l
			})
		}, dt.Accepted, 17, "hash mismatch"},
		{"removed event", func(dir string) {
			editLines(t, dir, dt.Accepted, func(l []string) []string { return append(l[:5], l[6:]...) }) // seq 13
		}, dt.Accepted, 13, "missing sequence"},
		{"reordered events", func(dir string) {
			editLines(t, dir, dt.Root, func(l []string) []string { l[3], l[4] = l[4], l[3]; return l }) // seqs 4, 5
		}, dt.Root, 4, "expected seq 4"},
		{"removed last event", func(dir string) {
			editLines(t, dir, dt.Sibling, func(l []string) []string { return l[:len(l)-1] })
		}, dt.Sibling, 10, "dossier.json names head 10"},
		{"altered head", func(dir string) {
			editJSON(t, dir, func(m map[string]any) {
				b := m["branches"].([]any)[1].(map[string]any)
				b["head"].(map[string]any)["hash"] = strings.Repeat("a", 64)
			})
		}, dt.Accepted, dt.AcceptedCloseSeq, "dossier.json names head"},
		{"altered tool result", func(dir string) {
			editJSON(t, dir, func(m map[string]any) {
				m["tool_calls"].([]any)[2].(map[string]any)["exit_code"] = 1
			})
		}, dt.Accepted, 18, "tool_calls[2].exit_code says 1, the events say 0"},
		{"altered usage", func(dir string) {
			editJSON(t, dir, func(m map[string]any) {
				m["usage"].(map[string]any)["total"].(map[string]any)["total"].(map[string]any)["in"] = 10
			})
		}, "", 0, "usage.total.total.in says 10, the events say 657"},
		{"fork link", func(dir string) {
			editLines(t, dir, dt.Root, func(l []string) []string {
				l[6] = strings.Replace(l[6], `"tool_calls":0`, `"tool_calls":9`, 1) // seq 7, the fork point
				return l
			})
		}, dt.Root, 7, "hash mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := copyDir(t, dir)
			tc.tamper(d)
			rep, err := dossier.Verify(d, nil)
			if err != nil {
				t.Fatalf("verify: %v", err)
			}
			if rep.OK || rep.Fault == nil {
				t.Fatalf("tampered dossier verified: %+v", rep)
			}
			if rep.Fault.Session != tc.session || rep.Fault.Seq != tc.seq || !strings.Contains(rep.Fault.Reason, tc.says) {
				t.Errorf("fault %+v; want %s at %d saying %q", rep.Fault, tc.session, tc.seq, tc.says)
			}
			if _, err := dossier.Open(d); !errors.As(err, new(*dossier.BrokenError)) {
				t.Errorf("open of a tampered dossier: %v, want a BrokenError", err)
			}
		})
	}
}

func TestVerifyRefusesGarbage(t *testing.T) {
	_, dir, _ := exported(t)
	for _, tc := range []struct {
		name   string
		tamper func(dir string)
		says   string
	}{
		{"no dossier", func(dir string) { os.Remove(filepath.Join(dir, dossier.FileJSON)) }, "no dossier.json"},
		{"not JSON", func(dir string) { os.WriteFile(filepath.Join(dir, dossier.FileJSON), []byte("garbage{"), 0o644) }, "not JSON"},
		{"not a dossier", func(dir string) { os.WriteFile(filepath.Join(dir, dossier.FileJSON), []byte(`{"hello":1}`), 0o644) }, "does not match the dossier schema"},
		{"events file missing", func(dir string) { os.Remove(filepath.Join(dir, "events", "fix-c.jsonl")) }, "branch fix-c"},
		{"events file garbage", func(dir string) {
			os.WriteFile(filepath.Join(dir, "events", "fix-c.jsonl"), []byte("{\nnope\n"), 0o644)
		}, "fix-c.jsonl line 1"},
		{"path escape", func(dir string) {
			editJSON(t, dir, func(m map[string]any) {
				m["branches"].([]any)[2].(map[string]any)["events_file"] = "events/../../x.jsonl"
			})
		}, "does not match the dossier schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := copyDir(t, dir)
			tc.tamper(d)
			_, err := dossier.Verify(d, nil)
			if !errors.Is(err, dossier.ErrNotDossier) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("verify: %v; want ErrNotDossier saying %q", err, tc.says)
			}
		})
	}
}

func TestDossierQuestions(t *testing.T) {
	_, dir, ids := exported(t)
	d, err := dossier.Open(dir) // the questions read the graph alone, offline
	if err != nil {
		t.Fatal(err)
	}

	// Recalled at step 11 of fix-b: its own recall, in its turn 2 (turn-3).
	r, err := d.Recalled(dt.Accepted, dt.AcceptedRecallSeq)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Recalls) != 1 || r.Recalls[0].EventID != ids["recall-3"] || r.Turn == nil || r.Turn.Number != 2 || r.Turn.TurnID != "turn-3" ||
		r.Decision == nil || r.Decision.EventID != ids["decide-coder"] {
		t.Fatalf("recalled at 11: %+v", r)
	}
	if w := r.Recalls[0].Written; len(w) != 2 || w[0] == nil || w[0].EventID != ids["memory-written"] || w[0].Provenance.Session != dt.Root || w[1] != nil {
		t.Errorf("provenance of the recalled items: %+v", w)
	}
	// A step inside the turn finds the turn's recall; turn 1 is inherited.
	if r, err := d.Recalled(dt.Accepted, 13); err != nil || len(r.Recalls) != 1 || r.StepType != "rath.model.called" {
		t.Errorf("recalled at 13: %+v %v", r, err)
	}
	if r, err := d.RecalledInTurn(dt.Accepted, 1); err != nil || len(r.Recalls) != 1 || r.Recalls[0].EventID != ids["recall-1"] || r.Recalls[0].Branch != dt.Root {
		t.Errorf("recalled in turn 1: %+v %v", r, err)
	}
	if _, err := d.Recalled(dt.Accepted, 99); !errors.Is(err, dossier.ErrNoStep) {
		t.Errorf("step 99: %v", err)
	}

	// Which tool call modified calc.go: both patches, the second on the accepted path.
	ch := d.ModifiedFile("calc.go")
	if len(ch) != 2 || ch[0].CallID != "c1" || ch[0].OnAcceptedPath || ch[1].CallID != "c2" || !ch[1].OnAcceptedPath || ch[1].FileDiff != dt.GoodDiff {
		t.Errorf("modified calc.go: %+v", ch)
	}
	if ch := d.ModifiedFile("other.go"); len(ch) != 0 {
		t.Errorf("modified other.go: %+v", ch)
	}

	// Why the selector routed the coder at step 9 of fix-b; and at step 10 (in force).
	ra, err := d.Route(dt.Accepted, dt.AcceptedRouteSeq, "agent:coder")
	if err != nil || len(ra.Decisions) != 1 || ra.Decisions[0].Rule != "retry" || ra.InForce || string(ra.Decisions[0].Inputs) == "" ||
		ra.Decisions[0].Cause == nil || ra.Decisions[0].Cause.EventID != ids["validation-failed"] || ra.Decisions[0].Cause.Seq != 0 {
		t.Errorf("route at 9: %+v %v", ra, err)
	}
	if ra, err := d.Route(dt.Accepted, 10, ""); err != nil || !ra.InForce || ra.Decisions[0].Seq != 9 {
		t.Errorf("route at 10: %+v %v", ra, err)
	}
	if ra, err := d.Route(dt.Accepted, 9, "close:succeeded"); err != nil || len(ra.Decisions) != 0 || ra.Other == nil {
		t.Errorf("route at 9 asking for close: %+v %v", ra, err)
	}
	if ra, err := d.Route(dt.Accepted, 0, "agent:researcher"); err != nil || len(ra.Decisions) != 1 || ra.Decisions[0].Branch != dt.Root {
		t.Errorf("route agent:researcher: %+v %v", ra, err)
	}

	// Usage on the accepted path, and on the sibling's own log.
	p, err := d.PathUsage("")
	if err != nil || p.Branch != dt.Accepted || p.Usage.ByAgent["coder"].In != 307 || p.Usage.ByAgent["researcher"].In != 100 || p.Usage.Total.Calls != 2 {
		t.Errorf("accepted path usage %+v %v", p, err)
	}
	if p, err := d.PathUsage(dt.Sibling); err != nil || p.Usage.Total != (session.Tokens{In: 150, Out: 15, Calls: 2}) {
		t.Errorf("sibling path usage %+v %v", p, err)
	}
}

func TestDiffFiles(t *testing.T) {
	for _, tc := range []struct {
		diff string
		want string
	}{
		{dt.GoodDiff, "calc.go"},
		{"diff --git a/x y.go b/x y.go\n--- a/x y.go\n+++ b/x y.go\n", "x y.go"},
		{"diff --git a/old.go b/new.go\nsimilarity index 90%\nrename from old.go\nrename to new.go\n", "old.go,new.go"},
		{"diff --git a/gone.go b/gone.go\ndeleted file mode 100644\n--- a/gone.go\n+++ /dev/null\n", "gone.go"},
		{"--- calc.go\t2024-01-01\n+++ calc.go\t2024-01-02\n@@ -1 +1 @@\n", "calc.go"},
		{"", ""},
	} {
		if got := strings.Join(dossier.DiffFiles(tc.diff), ","); got != tc.want {
			t.Errorf("DiffFiles(%q) = %q, want %q", tc.diff, got, tc.want)
		}
	}
	two := dt.BadDiff + "diff --git a/pkg/util.go b/pkg/util.go\n--- a/pkg/util.go\n+++ b/pkg/util.go\n@@ -1 +1 @@\n-x\n+y\n"
	if got := dossier.FileDiff(two, "util.go"); !strings.HasPrefix(got, "diff --git a/pkg/util.go") || strings.Contains(got, "calc.go") {
		t.Errorf("FileDiff(util.go) = %q", got)
	}
}
