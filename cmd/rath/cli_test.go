package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/services/session-ledger/service"
)

// result is what one run of rath printed and its exit code.
type result struct {
	code           int
	stdout, stderr string
}

// upCreds maps the URL of a server a test's rath up started to its client
// credentials file; natstest knows the others'.
var upCreds sync.Map

// credsArgs returns the flag that names the client credentials of the
// server at url, if a test started it.
func credsArgs(url string) []string {
	if p, ok := upCreds.Load(url); ok {
		return []string{"--creds", p.(string)}
	}
	if dir, ok := natstest.Lookup(url); ok {
		return []string{"--creds", filepath.Join(dir, auth.FileName(auth.RoleClient))}
	}
	return nil
}

// rath runs the command line in-process against the NATS server at url,
// as the client identity.
func rath(t *testing.T, url string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := execute(context.Background(), env{
		Args:   slices.Concat([]string{"--nats", url}, credsArgs(url), args),
		Stdin:  strings.NewReader(""),
		Stdout: &out,
		Stderr: &errb,
	})
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// ok runs rath and fails the test unless it exits 0.
func ok(t *testing.T, url string, args ...string) string {
	t.Helper()
	r := rath(t, url, args...)
	if r.code != exitOK {
		t.Fatalf("rath %s: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

// startLedger runs a real embedded JetStream and the session ledger on it,
// and returns the server's URL once the ledger answers.
func startLedger(t *testing.T) string {
	t.Helper()
	ns, _ := natstest.Start(t)
	nc := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleLedger)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := service.ConfigIn(t.TempDir())
	cfg.ApproversFile = filepath.Join(natstest.CredsDir(t, ns.ClientURL()), auth.ApproversFile)
	go func() { done <- service.Run(ctx, nc, cfg, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ledger stopped with %v", err)
		}
	})
	waitReady(t, ns.ClientURL())
	return ns.ClientURL()
}

func waitReady(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := rath(t, url, "ls", "--timeout", "200ms")
		if r.code == exitOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ledger answered at %s: exit %d, %s", url, r.code, r.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSessionLifecycle(t *testing.T) {
	url := startLedger(t)

	if got := ok(t, url, "start", "--id", "s1", "--task", "fix the parser", "--workflow", "testdata/fix.yaml", "--label", "team=core"); got != "s1\n" {
		t.Fatalf("start printed %q, want the session ID", got)
	}
	ok(t, url, "emit", "s1", events.TypeChunkAppended, "--data", `{"role":"user","content":"please fix TestParse"}`)
	dataFile := filepath.Join(t.TempDir(), "model.json")
	if err := os.WriteFile(dataFile, []byte(`{"agent":"coder","provider":"anthropic","model":"m1","tokens_in":100,"tokens_out":20,"latency_ms":5}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ok(t, url, "emit", "s1", events.TypeModelCalled, "--data", "@"+dataFile, "--expect-seq", "2")

	log := ok(t, url, "log", "s1")
	for _, want := range []string{"1  ", events.TypeSessionStarted, "task “fix the parser”", "user: please fix TestParse", "coder on anthropic/m1: 100 tokens in, 20 out"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if n := strings.Count(log, "\n"); n != 3 {
		t.Errorf("log has %d lines, want 3:\n%s", n, log)
	}
	if page := ok(t, url, "log", "s1", "--from", "2", "--limit", "1"); strings.Count(page, "\n") != 1 || !strings.Contains(page, events.TypeChunkAppended) {
		t.Errorf("log --from 2 --limit 1 = %q", page)
	}

	var ov session.Overview
	decode(t, ok(t, url, "state", "s1", "--at", "2", "--json"), &ov)
	if ov.Seq != 2 || ov.Chunks.Count != 1 || len(ov.Chunks.Last) != 1 || ov.Usage.Total.In != 0 || ov.Format != session.OverviewFormat {
		t.Errorf("state at 2: seq %d, %d chunks, %d tokens in, format %q; want 2, 1, 0, %s", ov.Seq, ov.Chunks.Count, ov.Usage.Total.In, ov.Format, session.OverviewFormat)
	}
	var st session.State
	decode(t, ok(t, url, "state", "s1", "--at", "2", "--full", "--json"), &st)
	if st.Seq != 2 || len(st.Chunks) != 1 || st.Usage.Total.In != 0 {
		t.Errorf("state --full at 2: seq %d, %d chunks, %d tokens in; want 2, 1, 0", st.Seq, len(st.Chunks), st.Usage.Total.In)
	}
	summary := ok(t, url, "state", "s1")
	for _, want := range []string{"status", "active", "seq 3", "agent coder", "model anthropic/m1", "chunks"} {
		if !strings.Contains(summary, want) {
			t.Errorf("state summary lacks %q:\n%s", want, summary)
		}
	}

	if got := ok(t, url, "fork", "s1", "--at", "2", "--id", "s2", "--reason", "try another way", "--label", "strategy=rewrite"); got != "s2\n" {
		t.Fatalf("fork printed %q, want s2", got)
	}
	ok(t, url, "emit", "s2", events.TypeChunkAppended, "--data", `{"role":"assistant","agent":"coder","content":"rewrote the parser"}`)
	graph := ok(t, url, "graph", "s2")
	if want := "root s1 (active, head 3)\n└─ fork-1@2 s2 (active, head 4) ◀\n"; graph != want {
		t.Errorf("graph s2 =\n%s\nwant\n%s", graph, want)
	}
	var g struct {
		api.Graph
		Names map[string]string `json:"names"`
	}
	decode(t, ok(t, url, "graph", "s2", "--json"), &g)
	if g.Root == nil || g.Root.Session != "s1" || g.Names["s1"] != "root" || g.Names["s2"] != "fork-1@2" {
		t.Errorf("graph --json: %+v", g)
	}

	var ack api.Ack
	decode(t, ok(t, url, "merge", "s1", "s2", "--reason", "it passed", "--json"), &ack)
	if ack.Session != "s1" || ack.Seq != 4 {
		t.Errorf("merge ack %+v, want s1 at 4", ack)
	}
	if graph := ok(t, url, "graph", "s1"); !strings.Contains(graph, "root s1 (active, head 4) ← merged fork-1@2 up to 4 ◀\n└─ fork-1@2 s2 (") {
		t.Errorf("graph after merge:\n%s", graph)
	}

	verify := ok(t, url, "verify", "s1")
	if !strings.HasPrefix(verify, "OK s1 head 4 ") {
		t.Errorf("verify printed %q", verify)
	}

	raw := ok(t, url, "log", "s2", "--json")
	lines := strings.Split(strings.TrimSpace(raw), "\n")
	if len(lines) != 4 {
		t.Fatalf("log s2 --json: %d lines, want 4 (2 inherited, fork, chunk):\n%s", len(lines), raw)
	}
	for i, l := range lines {
		ev, err := events.ParseStored([]byte(l))
		if err != nil || ev.Seq != uint64(i+1) {
			t.Errorf("line %d: seq %d, err %v", i+1, ev.Seq, err)
		}
		if h, err := events.ComputeHash([]byte(l)); err != nil || h != ev.Hash {
			t.Errorf("line %d is not the stored event: hash %s, recomputed %s (%v)", i+1, ev.Hash, h, err)
		}
	}

	var list []api.Session
	decode(t, ok(t, url, "ls", "--json", "--label", "team=core", "--label", "strategy=rewrite"), &list)
	if len(list) != 1 || list[0].ID != "s2" {
		t.Errorf("ls --label team=core --label strategy=rewrite = %+v, want s2 only (a fork inherits labels)", list)
	}
	table := ok(t, url, "ls")
	if !strings.Contains(table, "s2") || !strings.Contains(table, "s1@2") {
		t.Errorf("ls table lacks the fork:\n%s", table)
	}
	// ls shows each session's head, not the sequence of its last lifecycle change.
	decode(t, ok(t, url, "ls", "--json"), &list)
	for _, s := range list {
		var head session.Overview
		decode(t, ok(t, url, "state", s.ID, "--json"), &head)
		if s.Seq != head.Seq {
			t.Errorf("ls says %s is at %d, state says %d", s.ID, s.Seq, head.Seq)
		}
	}
}

func TestExitCodes(t *testing.T) {
	url := startLedger(t)
	ok(t, url, "start", "--id", "s1")

	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"missing session", []string{"state", "nope"}, exitNotFound, "session_not_found"},
		{"beyond the head", []string{"state", "s1", "--at", "9"}, exitNotFound, "out_of_range"},
		{"schema-invalid data", []string{"emit", "s1", events.TypeChunkAppended, "--data", `{"role":"robot"}`}, exitRefused, "schema"},
		{"unknown type", []string{"emit", "s1", "rath.no.such", "--data", `{}`}, exitRefused, "unknown_type"},
		{"stale sequence", []string{"emit", "s1", events.TypeSessionPaused, "--expect-seq", "7"}, exitRefused, "stale_sequence"},
		{"started twice", []string{"start", "--id", "s1"}, exitRefused, "session_exists"},
		{"bad session ID", []string{"log", "no.dots"}, exitRefused, "invalid_session"},
		{"nothing to merge", []string{"merge", "s1", "s1"}, exitRefused, "nothing_to_merge"},
		{"data not JSON", []string{"emit", "s1", events.TypeSessionPaused, "--data", `{`}, exitUsage, "not valid JSON"},
		{"missing argument", []string{"emit", "s1"}, exitUsage, "accepts 2 arg(s)"},
		{"unknown flag", []string{"ls", "--colour"}, exitUsage, "unknown flag"},
		{"unknown command", []string{"frobnicate"}, exitUsage, "unknown command"},
		{"bad label", []string{"ls", "--label", "team"}, exitUsage, "want key=value"},
		{"tail out of range", []string{"state", "s1", "--tail", "99"}, exitUsage, "--tail 99: want 0"},
		{"negative clip", []string{"state", "s1", "--clip", "-1"}, exitUsage, "--clip -1: want 0"},
		{"bad timeout", []string{"ls", "--timeout", "0s"}, exitUsage, "--timeout must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rath(t, url, tc.args...)
			if r.code != tc.code || !strings.HasPrefix(r.stderr, "rath: ") || !strings.Contains(r.stderr, tc.says) {
				t.Errorf("exit %d, stderr %q; want exit %d and a message with %q", r.code, r.stderr, tc.code, tc.says)
			}
		})
	}

	rej := ok(t, url, "rejects", "s1")
	if !strings.Contains(rej, "schema") || !strings.Contains(rej, "unknown_type") || !strings.Contains(rej, "request") {
		t.Errorf("rejects s1 lacks the refusals:\n%s", rej)
	}
}

func TestNothingAnswers(t *testing.T) {
	ns, _ := natstest.Start(t) // NATS, but no ledger yet
	start := time.Now()
	r := rath(t, ns.ClientURL(), "ls", "--timeout", "300ms")
	if r.code != exitUnavailable || !strings.Contains(r.stderr, `is "rath up" running?`) {
		t.Errorf("no ledger: exit %d, stderr %q; want %d and a hint", r.code, r.stderr, exitUnavailable)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("gave up after %s with --timeout 300ms", d)
	}
	if r = rath(t, ns.ClientURL(), "rejects", "--timeout", "300ms"); r.code != exitUnavailable {
		t.Errorf("rejects before any ledger ran: exit %d, stderr %q; want %d", r.code, r.stderr, exitUnavailable)
	}

	url := ns.ClientURL()
	ns.Shutdown()
	ns.WaitForShutdown()
	r = rath(t, url, "state", "s1", "--timeout", "300ms")
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "no NATS server at "+url) {
		t.Errorf("no NATS: exit %d, stderr %q; want %d", r.code, r.stderr, exitUnavailable)
	}
}

func TestVerifyBroken(t *testing.T) {
	url := startLedger(t)
	ok(t, url, "start", "--id", "s1")
	ok(t, url, "emit", "s1", events.TypeChunkAppended, "--data", `{"role":"user","content":"hello"}`)

	// Write a forged event behind the ledger's back: it claims the next
	// sequence and chains correctly, but its hash does not match its body.
	var head events.Stored
	decode(t, strings.TrimSpace(ok(t, url, "log", "s1", "--from", "2", "--json")), &head)
	forged := map[string]any{
		"specversion": "1.0", "id": events.NewID(), "source": "mallory", "type": events.TypeChunkAppended,
		"subject": "s1", "time": time.Now().UTC(), "datacontenttype": "application/json",
		"data":    map[string]string{"role": "user", "content": "forged"},
		"rathseq": 3, "rathprev": head.Hash, "rathhash": strings.Repeat("0", 64),
	}
	body, _ := json.Marshal(forged)
	js, err := jetstream.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(context.Background(), events.SessionSubject(events.DefaultTenant, "s1", events.TokenConversation), body); err != nil {
		t.Fatal(err)
	}

	r := rath(t, url, "verify", "s1")
	if r.code != exitBroken || !strings.HasPrefix(r.stdout, "BROKEN s1 at 3: hash mismatch") {
		t.Errorf("verify: exit %d, stdout %q, stderr %q; want %d and BROKEN at 3", r.code, r.stdout, r.stderr, exitBroken)
	}
}

func TestWatch(t *testing.T) {
	url := startLedger(t)
	ok(t, url, "start", "--id", "s1")
	ok(t, url, "emit", "s1", events.TypeChunkAppended, "--data", `{"role":"user","content":"before"}`)

	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- execute(ctx, env{Args: slices.Concat([]string{"--nats", url}, credsArgs(url), []string{"watch", "s1", "--from", "2"}), Stdout: &out, Stderr: &out})
	}()
	waitFor(t, &out, "user: before")
	ok(t, url, "emit", "s1", events.TypeToolRequested, "--data", `{"call_id":"c1","tool":"shell"}`)
	waitFor(t, &out, "shell c1")
	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("watch stopped by Ctrl-C exited %d: %s", code, out.String())
	}
	if got := out.String(); strings.Contains(got, events.TypeSessionStarted) || strings.Count(got, "\n") != 2 {
		t.Errorf("watch --from 2 printed:\n%s\nwant the chunk and the tool request only", got)
	}
}

func decode(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader in parallel.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func waitFor(t *testing.T, b *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(b.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in:\n%s", want, b.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A batch's compact receipt (a record reference, its record beside it),
// kept as JSON, checks with verify --receipt like an inline one; the same
// receipt without its record is refused, naming what is missing.
func TestVerifyCompactReceipt(t *testing.T) {
	url := startLedger(t)
	c, err := client.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	var batch []event.Event
	for i := range events.MinRecord {
		id := fmt.Sprintf("r%d", i)
		ok(t, url, "start", "--id", id)
		ev, err := events.New(id, &events.ChunkAppended{Role: events.RoleUser, Content: "batched"})
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, ev)
	}
	res, err := c.AppendBatch(context.Background(), batch)
	if err != nil || res[0].Err != nil {
		t.Fatalf("batch: %v %v", err, res[0].Err)
	}
	a := res[0].Ack
	if !events.IsRecordRef(a.Sig) {
		t.Fatalf("ack sig %q, want a record reference", a.Sig)
	}
	dir := t.TempDir()
	kept, _ := json.Marshal(a)
	receipt := filepath.Join(dir, "receipt.json")
	os.WriteFile(receipt, kept, 0o644)
	if got := ok(t, url, "verify", "--receipt", receipt); !strings.HasPrefix(got, "OK receipt r0:2 event ") || !strings.Contains(got, " (named by the ledger itself: pin its key with --key); in the log") {
		t.Errorf("verify --receipt of a compact receipt printed %q", got)
	}
	a.Record = nil
	bare, _ := json.Marshal(a)
	os.WriteFile(receipt, bare, 0o644)
	if r := rath(t, url, "verify", "--receipt", receipt); r.code != exitBroken || !strings.Contains(r.stdout, "does not carry") {
		t.Errorf("a compact receipt without its record: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// The attack of issue 10: read the head, seal an event onto it with a
// correct chain hash (events.Seal, no key) and publish it straight into the
// stream. verify names it (exit 5), the next emit is refused as damaged
// (exit 5), and a receipt of a real event still checks.
func TestForgedEventWithACorrectHash(t *testing.T) {
	url := startLedger(t)
	ok(t, url, "start", "--id", "s1")
	receipt := filepath.Join(t.TempDir(), "receipt.json")
	os.WriteFile(receipt, []byte(ok(t, url, "emit", "s1", events.TypeChunkAppended, "--data", `{"role":"user","content":"hello"}`, "--json")), 0o644)
	if got := ok(t, url, "verify", "--receipt", receipt); !strings.HasPrefix(got, "OK receipt s1:2 event ") || !strings.Contains(got, "chain OK through head 2") {
		t.Errorf("verify --receipt printed %q", got)
	}
	if got := ok(t, url, "verify", "s1"); !strings.Contains(got, " signed by ") {
		t.Errorf("verify printed %q", got)
	}
	var keys api.Keys
	decode(t, ok(t, url, "verify", "--show-key", "--json"), &keys)
	pinned := filepath.Join(t.TempDir(), "ledger.pub")
	os.WriteFile(pinned, []byte(keys.Keys[0].PEM), 0o644)
	ok(t, url, "verify", "s1", "--key", pinned)
	other, _ := events.GenerateSigningKey()
	otherPEM, _ := events.MarshalPublicKey(other.Public())
	otherFile := filepath.Join(t.TempDir(), "other.pub")
	os.WriteFile(otherFile, otherPEM, 0o644)
	if r := rath(t, url, "verify", "s1", "--key", otherFile); r.code != exitBroken || !strings.Contains(r.stdout, "checked with the pinned key: signed by an unknown key") {
		t.Errorf("verify with another pinned key: exit %d, stdout %q", r.code, r.stdout)
	}

	var head events.Stored
	decode(t, strings.TrimSpace(ok(t, url, "log", "s1", "--from", "2", "--json")), &head)
	ev, _ := events.New("s1", &events.ChunkAppended{Role: events.RoleUser, Content: "forged"}, events.WithSource("mallory"))
	body, _, err := events.Seal(&ev, 3, head.Hash, nil)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(context.Background(), events.SessionSubject(events.DefaultTenant, "s1", events.TokenConversation), body); err != nil {
		t.Fatal(err)
	}
	r := rath(t, url, "verify", "s1")
	if r.code != exitBroken || !strings.HasPrefix(r.stdout, "BROKEN s1 at 3: sequence 3 is not signed") {
		t.Errorf("verify: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = rath(t, url, "emit", "s1", events.TypeChunkAppended, "--data", `{"role":"user","content":"after"}`)
	if r.code != exitBroken || !strings.Contains(r.stderr, "damaged: session s1 is damaged: its event at 3") {
		t.Errorf("emit after a forgery: exit %d, stderr %q", r.code, r.stderr)
	}
	// The receipt's own event is still where it was, but the chain above
	// it no longer holds.
	if r := rath(t, url, "verify", "--receipt", receipt); r.code != exitBroken || !strings.Contains(r.stdout, "chain is broken at 3") {
		t.Errorf("receipt over a forged chain: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// Bad input to verify: named, exit 2.
	garbage := filepath.Join(t.TempDir(), "garbage.json")
	os.WriteFile(garbage, []byte(`{"hello":1}`), 0o644)
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"verify", "--receipt", garbage}, "not a receipt"},
		{[]string{"verify", "--receipt", filepath.Join(t.TempDir(), "none.json")}, "no such file"},
		{[]string{"verify", "s1", "--key", garbage}, "not a PEM"},
		{[]string{"verify", "s1", "--key", filepath.Join(t.TempDir(), "none.pub")}, "no such file"},
	} {
		if r := rath(t, url, tc.args...); r.code != exitUsage || !strings.Contains(r.stderr, tc.says) {
			t.Errorf("rath %s: exit %d, stderr %q; want %d saying %q", strings.Join(tc.args, " "), r.code, r.stderr, exitUsage, tc.says)
		}
	}
	// A receipt edited to claim another place fails its signature.
	var ack api.Ack
	data, _ := os.ReadFile(receipt)
	json.Unmarshal(data, &ack)
	ack.Seq = 1
	data, _ = json.Marshal(ack)
	os.WriteFile(receipt, data, 0o644)
	if r := rath(t, url, "verify", "--receipt", receipt); r.code != exitBroken || !strings.Contains(r.stdout, "the receipt's signature: bad signature") {
		t.Errorf("edited receipt: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// rath log marks events written around the ledger (issue 29): one an
// operator appended unsigned with a correct hash and link, one signed by a
// key the ledger does not hold, one whose content does not hash to its
// claim; the ledger's own stay unmarked, and stderr counts the others.
func TestLogMarksForgedEvents(t *testing.T) {
	url := startLedger(t)
	ok(t, url, "start", "--id", "s1")
	ok(t, url, "emit", "s1", events.TypeChunkAppended, "--data", `{"role":"user","content":"hello"}`)
	var head events.Stored
	decode(t, strings.TrimSpace(ok(t, url, "log", "s1", "--from", "2", "--json")), &head)
	js, err := jetstream.New(natstest.Connect(t, url)) // an operator's access
	if err != nil {
		t.Fatal(err)
	}
	other, err := events.GenerateSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	prev := head.Hash
	for seq, key := range []*events.SigningKey{nil, other, nil} {
		ev, err := events.New("s1", &events.ChunkAppended{Role: events.RoleUser, Content: "forged"}, events.WithSource("mallory"))
		if err != nil {
			t.Fatal(err)
		}
		body, hash, err := events.Seal(&ev, uint64(seq+3), prev, key)
		if err != nil {
			t.Fatal(err)
		}
		if seq == 2 {
			body = bytes.Replace(body, []byte(`"forged"`), []byte(`"edited"`), 1)
		}
		if _, err := js.Publish(context.Background(), events.SessionSubject(events.DefaultTenant, "s1", events.TokenConversation), body); err != nil {
			t.Fatal(err)
		}
		prev = hash
	}
	r := rath(t, url, "log", "s1")
	if r.code != exitOK {
		t.Fatalf("log: exit %d, stderr %q", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	marks := 0
	for i, line := range lines {
		if !strings.Contains(line, "!! NOT THE LEDGER'S") {
			continue
		}
		marks++
		if i == 0 || !strings.Contains(lines[i-1], "forged") && !strings.Contains(lines[i-1], "edited") {
			t.Errorf("mark %q under %q, want it under a forged event", line, lines[max(i-1, 0)])
		}
	}
	for _, want := range []string{"NOT THE LEDGER'S: not signed", "signed by an unknown key", "its content hashes to"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("log does not say %q:\n%s", want, r.stdout)
		}
	}
	if marks != 3 || !strings.Contains(r.stderr, "3 events of s1 not as the ledger stored and signed them (first: 3): run rath verify s1") {
		t.Errorf("%d marks; stderr %q\n%s", marks, r.stderr, r.stdout)
	}
}
