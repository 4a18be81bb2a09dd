package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	demoex "github.com/openrath/rath/examples/demo"
	"github.com/openrath/rath/internal/dossier"
	dt "github.com/openrath/rath/internal/dossier/dossiertest"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// TestDemo runs `rath demo` as CI does and checks what it claims: the
// rejected and the accepted branch exist, the accepted branch's tests pass in
// its workspace, the failure pattern went to memory with its provenance, the
// dossier validates against its schema and verifies, and each audit question
// answers correctly about the run.
func TestDemo(t *testing.T) {
	run, stdout := runDemoForTest(t)
	out := run.out
	ctx := context.Background()
	c, err := client.New(run.rt.Conn)
	if err != nil {
		t.Fatal(err)
	}

	// Two branches: the root, whose patch the validator rejected, and the
	// fork from before that patch, accepted.
	g, err := c.Lineage(ctx, run.root)
	if err != nil {
		t.Fatal(err)
	}
	if g.Root == nil || len(g.Root.Children) != 1 {
		t.Fatalf("lineage %+v, want a root with one fork:\n%s", g.Root, stdout.String())
	}
	fork := g.Root.Children[0].Session
	root, err := c.State(ctx, run.root)
	if err != nil {
		t.Fatal(err)
	}
	accepted, err := c.State(ctx, fork)
	if err != nil {
		t.Fatal(err)
	}
	if root.Outcome != "superseded" || lastValidation(root) == nil || lastValidation(root).Passed {
		t.Fatalf("root: outcome %q, validations %+v; want superseded after a failed validation", root.Outcome, root.Validations)
	}
	if accepted.Outcome != "accepted" || lastValidation(accepted) == nil || !lastValidation(accepted).Passed {
		t.Fatalf("fork: outcome %q, validations %+v; want accepted after a passed validation", accepted.Outcome, accepted.Validations)
	}
	if coder := firstDecision(root, "agent:coder"); coder == nil || accepted.Lineage.ForkSeq != coder.Seq-1 {
		t.Fatalf("fork at %d, want just before the root's first coder decision (%+v)", accepted.Lineage.ForkSeq, coder)
	}

	// The accepted branch's workspace passes its tests, run here, outside
	// Rath; the rejected one does not.
	for _, tc := range []struct {
		st   *session.State
		pass bool
	}{{accepted, true}, {root, false}} {
		if tc.st.Sandbox == nil || tc.st.Sandbox.Workspace == "" {
			t.Fatalf("%s has no workspace: %+v", tc.st.ID, tc.st.Sandbox)
		}
		cmd := exec.Command("go", "test", "./...")
		cmd.Dir = tc.st.Sandbox.Workspace
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		outb, err := cmd.CombinedOutput()
		if (err == nil) != tc.pass {
			t.Fatalf("go test in %s's workspace: %v, want pass=%v\n%s", tc.st.ID, err, tc.pass, outb)
		}
	}

	// The failure pattern of the rejected branch is in memory, justified by
	// the failed validation.
	var pattern *events.MemoryWritten
	var failed string
	log, err := c.Log(ctx, run.root, client.Range{From: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range log {
		switch ev.Type {
		case events.TypeValidationFailed:
			failed = ev.ID
		case events.TypeMemoryWritten:
			var w events.MemoryWritten
			if err := json.Unmarshal(ev.Data, &w); err != nil {
				t.Fatal(err)
			}
			if w.Provenance.Evidence == "validation_signal" {
				pattern = &w
			}
		}
	}
	if pattern == nil || failed == "" || len(pattern.Provenance.EventIDs) != 1 || pattern.Provenance.EventIDs[0] != failed {
		t.Fatalf("failure pattern %+v, want one justified by the failed validation %s", pattern, failed)
	}
	// The accepted branch's coder recalled it.
	recalled := false
	for _, m := range accepted.Memory {
		if m.Kind == "recalled" && m.Seq > accepted.Lineage.ForkSeq && slices.Contains(m.ItemIDs, pattern.ItemID) {
			recalled = true
		}
	}
	if !recalled {
		t.Fatalf("the accepted branch never recalled the failure pattern %s: %+v", pattern.ItemID, accepted.Memory)
	}

	// The dossier validates and verifies.
	raw, err := os.ReadFile(filepath.Join(out, "dossier.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := dossier.ValidateJSON(raw); err != nil {
		t.Fatalf("dossier.json: %v", err)
	}
	if got := ok(t, "nats://127.0.0.1:1", "verify", "--dossier", out); !strings.HasPrefix(got, "OK") {
		t.Fatalf("verify --dossier: %q", got)
	}

	// What a person reads: the branches by the same names in the printed
	// run and in dossier.md, whose tables a GFM renderer reads whole, and
	// the failure pattern's text, written on the root, recalled on the fork.
	forkName := fmt.Sprintf("fork-1@%d", accepted.Lineage.ForkSeq)
	var writtenAt uint64
	for _, m := range root.Memory {
		if m.Kind == "written" && slices.Contains(m.ItemIDs, pattern.ItemID) {
			writtenAt = m.Seq
		}
	}
	printed := stdout.String()
	for _, s := range []string{
		fmt.Sprintf("  %-10s %4d  fork of root at %d: ", forkName, accepted.Lineage.ForkSeq+1, accepted.Lineage.ForkSeq),
		fmt.Sprintf("memory recalled for coder: 1 item (%s, written on root at %d)", pattern.ItemID, writtenAt),
		fmt.Sprintf("  %-10s %-18s accepted", forkName, fmt.Sprintf("fork of root at %d", accepted.Lineage.ForkSeq)),
	} {
		if !strings.Contains(printed, s) {
			t.Errorf("the demo did not print %q:\n%s", s, printed)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, dossier.FileMarkdown))
	if err != nil {
		t.Fatal(err)
	}
	var branches *dt.Table
	for _, tb := range dt.Tables(t, md) {
		if tb.Column("session ID") == 1 {
			branches = &tb
		}
	}
	if branches == nil || len(branches.Rows) != 2 || len(branches.Rows[0]) != len(branches.Header) ||
		strings.Join(branches.Rows[0][:4], " | ") != "root | "+run.root+" | - | closed (superseded)" || !strings.HasPrefix(branches.Rows[0][4], "rejected: validation go test failed") ||
		strings.Join(branches.Rows[1][:5], " | ") != forkName+" | "+fork+" | root @ "+strconv.FormatUint(accepted.Lineage.ForkSeq, 10)+" | closed (accepted) | accepted: closed accepted after go test passed (seq "+
			strconv.FormatUint(lastValidation(accepted).Seq, 10)+")" {
		t.Errorf("dossier.md's branch table, as a GFM renderer reads it: %+v", branches)
	}
	if text := dt.Text(t, md); !strings.Contains(text, fmt.Sprintf("%s v%d, written on root at seq %d (scope %s); recalled on %s at seq ", pattern.ItemID, pattern.Version, writtenAt, pattern.Scope, forkName)) {
		t.Errorf("dossier.md does not say the fork recalled the root's failure pattern:\n%s", text)
	}
	if !slices.Contains(dt.CodeBlocks(t, md), pattern.Content+"\n") {
		t.Errorf("dossier.md does not show the failure pattern's text %q", pattern.Content)
	}

	// The audit questions, against the live ledger.
	url := run.rt.URL
	var final struct {
		Final struct {
			Branch    string `json:"branch"`
			Outcome   string `json:"outcome"`
			Validated bool   `json:"validated"`
		} `json:"final"`
	}
	decode(t, ok(t, url, "--json", "audit", "final", run.root), &final)
	if final.Final.Branch != fork || final.Final.Outcome != "accepted" || !final.Final.Validated {
		t.Fatalf("audit final: %+v, want the validated, accepted fork %s", final.Final, fork)
	}
	if got := ok(t, url, "audit", "modified", fork, "--file", "slug.go"); !strings.Contains(got, "unicode.IsLetter") {
		t.Fatalf("audit modified: %q, want the accepted patch", got)
	}
	recordSeq := decisionSeq(root, "record-failure")
	if got := ok(t, url, "audit", "route", run.root, "--step", strconv.FormatUint(recordSeq, 10)); !strings.Contains(got, "by rule record-failure") ||
		!strings.Contains(got, "rath.validation.failed") {
		t.Fatalf("audit route at %d: %q, want the record-failure rule triggered by the failed validation", recordSeq, got)
	}
	recalledStep := uint64(0)
	for _, m := range accepted.Memory {
		if m.Kind == "recalled" && slices.Contains(m.ItemIDs, pattern.ItemID) {
			recalledStep = m.Seq
			break
		}
	}
	if got := ok(t, url, "audit", "recalled", fork, "--step", strconv.FormatUint(recalledStep, 10)); !strings.Contains(got, pattern.ItemID) {
		t.Fatalf("audit recalled at %d: %q, want %s", recalledStep, got, pattern.ItemID)
	}
	if got := ok(t, url, "audit", "usage", run.root); !strings.Contains(got, "accepted path of "+forkName+" ("+fork+")") || !strings.Contains(got, "agent coder") || !strings.Contains(got, "agent validator") {
		t.Fatalf("audit usage: %q", got)
	}

	// The console shows the run in a real browser.
	t.Run("console", func(t *testing.T) { checkConsole(t, c, run.root, fork, forkName) })

	// --serve keeps the runtime up with a console of its own, and prints a
	// one-time link to the root's page that signs a browser in.
	t.Run("serve", func(t *testing.T) {
		out := &syncBuffer{}
		a := &app{env: env{Stdout: out, Stderr: out}, timeout: 10 * time.Second}
		sctx, stop := context.WithCancel(ctx)
		served := make(chan struct{})
		go func() { a.serveDemo(sctx, run); close(served) }()
		defer func() { stop(); <-served }()
		var url string
		testrig.Eventually(t, time.Minute, "the console's address in the output", func() (bool, string) {
			_, line, ok := strings.Cut(out.String(), "the console: ")
			url, _, _ = strings.Cut(line, "\n")
			return ok && strings.HasSuffix(line, "\n"), out.String()
		})
		base, _, ok := strings.Cut(url, "/login/")
		if !ok {
			t.Fatalf("the console's address %q is not a sign-in link", url)
		}
		jar, _ := cookiejar.New(nil)
		browser := &http.Client{Jar: jar}
		get := func(url string) (int, string) {
			t.Helper()
			res, err := browser.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, _ := io.ReadAll(res.Body)
			return res.StatusCode, string(body)
		}
		if code, body := get(base + "/s/" + run.root); code != http.StatusOK || !strings.Contains(body, "Sign in") || strings.Contains(body, "dossier.md") {
			t.Fatalf("the root's page before sign-in: %d, want the sign-in page\n%s", code, body)
		}
		if code, body := get(url); code != http.StatusOK || !strings.Contains(body, `href="/s/`+run.root+`" data-continue`) {
			t.Fatalf("GET %s: %d\n%s", url, code, body)
		}
		if code, body := get(base + "/s/" + run.root); code != http.StatusOK || !strings.Contains(body, "dossier.md") {
			t.Fatalf("the root's page signed in: %d\n%s", code, body)
		}
		browser.Jar, _ = cookiejar.New(nil)
		if code, _ := get(url); code != http.StatusUnauthorized {
			t.Errorf("the link used again: %d, want 401", code)
		}
	})
}

// runDemoForTest runs the demo as `rath demo` does and keeps its runtime up
// until the test ends. It skips where the example's tests cannot run.
//
// allow are the model endpoints, besides the official ones, the runtime's
// agent worker allows (--allow-base-url).
// The scripted models count tokens from what they read, so two runs of the
// demo on one machine count the same tokens, call by call: nothing that
// changes from run to run (a time, a generated ID, a map's order) is in
// what a model reads, or in the length of it. (A run on another sandbox
// backend may count a few more or fewer: a failed command's result lists
// the limits its sandbox set, and bwrap sets one that local cannot.)
func TestDemoCountsTheSameTokensEachRun(t *testing.T) {
	calls := func() []string {
		run, stdout := runDemoForTest(t)
		c, err := client.New(run.rt.Conn)
		if err != nil {
			t.Fatal(err)
		}
		d, err := dossier.Open(run.out)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, b := range d.Branches {
			evs, err := c.Log(context.Background(), b.ID, client.Range{From: b.FirstSeq})
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs {
				if ev.Type != events.TypeModelCalled || ev.Session != b.ID {
					continue
				}
				var m events.ModelCalled
				if err := json.Unmarshal(ev.Data, &m); err != nil {
					t.Fatal(err)
				}
				out = append(out, fmt.Sprintf("%s seq %d %s: in %d, out %d", b.Name, ev.Seq, m.Agent, m.TokensIn, m.TokensOut))
			}
		}
		if len(out) == 0 {
			t.Fatalf("the demo made no model call:\n%s", stdout.String())
		}
		return out
	}
	first, second := calls(), calls()
	if !slices.Equal(first, second) {
		t.Errorf("two runs of the demo counted different tokens:\n%s\n---\n%s", strings.Join(first, "\n"), strings.Join(second, "\n"))
	}
}

func runDemoForTest(t *testing.T, allow ...string) (*demoRun, *syncBuffer) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the whole agent loop with real go test calls")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to run the example's tests")
	}
	stdout := &syncBuffer{}
	a := &app{env: env{Stdout: stdout, Stderr: stdout}, timeout: 10 * time.Second}
	run, err := a.runDemo(context.Background(), demoOptions{out: filepath.Join(t.TempDir(), "dossier"), wait: 3 * time.Minute, allowBaseURLs: allow})
	if run != nil {
		t.Cleanup(run.close)
	}
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, stdout.String())
	}
	upCreds.Store(run.rt.URL, run.rt.Creds)
	t.Cleanup(func() {
		upCreds.Delete(run.rt.URL)
		// Every service had the permissions it used.
		for _, err := range run.rt.Violations() {
			t.Errorf("permission violation in the demo's runtime: %v", err)
		}
	})
	return run, stdout
}

func lastValidation(st *session.State) *session.Validation {
	if n := len(st.Validations); n > 0 {
		return &st.Validations[n-1]
	}
	return nil
}

func firstDecision(st *session.State, route string) *session.Decision {
	for i := range st.Decisions {
		if st.Decisions[i].Route == route {
			return &st.Decisions[i]
		}
	}
	return nil
}

func decisionSeq(st *session.State, rule string) uint64 {
	for _, d := range st.Decisions {
		if d.Rule == rule {
			return d.Seq
		}
	}
	return 0
}

// `rath demo --provider` runs the same workflow with every agent on the
// live model: the rewritten file parses, keeps the rules, and has no script.
func TestLiveWorkflow(t *testing.T) {
	example := t.TempDir()
	if err := demoex.Write(example); err != nil {
		t.Fatal(err)
	}
	path, err := liveWorkflow(filepath.Join(example, "workflow.yaml"), t.TempDir(), liveModel{provider: "openai", model: "m-1", baseURL: "http://127.0.0.1:1/v1"})
	if err != nil {
		t.Fatal(err)
	}
	live, err := workflow.Load(path)
	if err != nil {
		t.Fatalf("rewritten workflow: %v", err)
	}
	orig, err := workflow.Load(filepath.Join(example, "workflow.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(live.Agents) != len(orig.Agents) || len(live.Rules) != len(orig.Rules) {
		t.Fatalf("live workflow has %d agents and %d rules, want %d and %d", len(live.Agents), len(live.Rules), len(orig.Agents), len(orig.Rules))
	}
	for _, a := range live.Agents {
		if a.Provider != "openai" || a.Model != "m-1" || a.BaseURL != "http://127.0.0.1:1/v1" || a.Script != "" {
			t.Fatalf("agent %s: %+v", a.Name, a)
		}
	}
	for _, bad := range []liveModel{{provider: "gpt"}, {provider: "openai"}} {
		if _, err := liveWorkflow(filepath.Join(example, "workflow.yaml"), t.TempDir(), bad); err == nil {
			t.Fatalf("liveWorkflow accepted %+v", bad)
		}
	}
}

// The demo's agent worker allows what its flags allow, and the --base-url
// its operator named; an unknown provider allows nothing (liveWorkflow
// refuses it).
func TestDemoAllowsTheEndpointItIsGiven(t *testing.T) {
	o := demoOptions{allowBaseURLs: []string{"anthropic=https://llm.example.com"}, allowLoopback: true,
		live: liveModel{provider: "openai", model: "m-1", baseURL: "http://10.0.0.5:8000/v1"}}
	cfg := o.config(t.TempDir())
	if want := []string{"anthropic=https://llm.example.com", "openai=http://10.0.0.5:8000/v1"}; !slices.Equal(cfg.Worker.AllowBaseURLs, want) || !cfg.Worker.AllowLoopback {
		t.Fatalf("allowed %v, loopback %v; want %v and loopback", cfg.Worker.AllowBaseURLs, cfg.Worker.AllowLoopback, want)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg := (demoOptions{}).config(t.TempDir()); len(cfg.Worker.AllowBaseURLs) != 0 || cfg.Worker.AllowLoopback {
		t.Fatalf("without flags the demo allows %v, loopback %v", cfg.Worker.AllowBaseURLs, cfg.Worker.AllowLoopback)
	}
	if cfg := (demoOptions{live: liveModel{provider: "gemini", baseURL: "http://10.0.0.5/v1"}}).config(t.TempDir()); len(cfg.Worker.AllowBaseURLs) != 0 {
		t.Fatalf("an unknown provider's endpoint allowed: %v", cfg.Worker.AllowBaseURLs)
	}
}

// TestDemoFromTheBinary builds rath and runs `rath demo` in a directory
// outside the repository, as a user who ran go install does: the example
// comes from the binary. The command the demo prints to check its dossier
// runs as printed.
func TestDemoFromTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds rath and runs the whole demo")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build rath")
	}
	bin := filepath.Join(t.TempDir(), "rath")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	cmd := exec.Command(bin, "demo")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("rath demo in %s: %v\n%s", dir, err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "rath-demo", "dossier.json")); err != nil {
		t.Fatalf("no dossier in ./rath-demo: %v\n%s", err, out)
	}
	_, check, found := strings.Cut(string(out), "check it with: ")
	check, _, _ = strings.Cut(check, ")")
	if !found || !strings.HasPrefix(check, bin+" verify --dossier ") {
		t.Fatalf("the demo printed no check command of %s:\n%s", bin, out)
	}
	verify := exec.Command("sh", "-c", check)
	verify.Dir = dir
	if got, err := verify.CombinedOutput(); err != nil || !strings.HasPrefix(string(got), "OK") {
		t.Fatalf("%s: %v\n%s", check, err, got)
	}
}
