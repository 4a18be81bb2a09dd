package main

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
)

// notifyBuffer is a writer safe for a writer and a reader in parallel that
// signals each write, so a test waits for output rather than polling it.
type notifyBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{}
}

func newNotifyBuffer() *notifyBuffer { return &notifyBuffer{changed: make(chan struct{}, 1)} }

func (b *notifyBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	n, err := b.b.Write(p)
	b.mu.Unlock()
	select {
	case b.changed <- struct{}{}:
	default: // a signal is pending already
	}
	return n, err
}

func (b *notifyBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// await returns once the output holds want; it fails the test after 10s.
func (b *notifyBuffer) await(t *testing.T, want string) {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for !strings.Contains(b.String(), want) {
		select {
		case <-b.changed:
		case <-timeout.C:
			t.Fatalf("no %q in:\n%s", want, b.String())
		}
	}
}

// rath watch shows only the ledger's events: forged events, garbage and a
// forged far-future sequence on the live subject are skipped with a warning
// on stderr, and the watch goes on to show the real next event.
func TestWatchSkipsForgeries(t *testing.T) {
	url := startLedger(t)
	ok(t, url, "start", "--id", "s1")
	ok(t, url, "emit", "s1", events.TypeChunkAppended, "--data", `{"role":"user","content":"before"}`)
	var head events.Stored
	decode(t, strings.TrimSpace(ok(t, url, "log", "s1", "--from", "2", "--json")), &head)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errs := newNotifyBuffer(), newNotifyBuffer()
	done := make(chan int, 1)
	go func() {
		done <- execute(ctx, env{Args: slices.Concat([]string{"--nats", url}, credsArgs(url), []string{"watch", "s1", "--from", "2"}), Stdout: out, Stderr: errs})
	}()
	out.await(t, "user: before") // the history is read after the subscription is in place

	nc := natstest.Connect(t, url)
	live := strings.TrimSuffix(events.LiveFilter(events.DefaultTenant, "s1"), ">") + events.TokenConversation
	publish := func(body []byte) {
		t.Helper()
		if err := nc.Publish(live, body); err != nil {
			t.Fatal(err)
		}
	}
	seal := func(seq uint64, prev, content string) []byte {
		t.Helper()
		ev, err := events.New("s1", &events.ChunkAppended{Role: events.RoleUser, Content: content}, events.WithSource("mallory"))
		if err != nil {
			t.Fatal(err)
		}
		body, _, err := events.Seal(&ev, seq, prev, nil)
		if err != nil {
			t.Fatal(err)
		}
		return body
	}

	publish(seal(3, head.Hash, "forged"))
	errs.await(t, "rath: watch s1: skipped the live message on "+live+" (seq 3): not the ledger's event: not signed")
	publish([]byte("garbage"))
	errs.await(t, "rath: watch s1: skipped the live message on "+live+": not a stored event")
	publish(seal(2147483646, head.Hash, "far ahead"))
	errs.await(t, "(seq 2147483646): not the ledger's event")

	ok(t, url, "emit", "s1", events.TypeChunkAppended, "--data", `{"role":"user","content":"after"}`)
	out.await(t, "user: after")
	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("watch stopped by Ctrl-C exited %d: %s", code, errs.String())
	}
	got := out.String()
	if strings.Contains(got, "forged") || strings.Contains(got, "far ahead") || strings.Count(got, "\n") != 2 || !strings.Contains(got, "    3  ") {
		t.Errorf("watch printed:\n%s\nwant the ledger's events 2 and 3 only", got)
	}
	if n := strings.Count(errs.String(), "\n"); n != 3 {
		t.Errorf("%d warnings, want 3:\n%s", n, errs.String())
	}
}

// rath watch shows an answer as it streams, on a "~" line that the stored
// events then follow; a delta's control characters (an escape sequence a
// user of the tenant slipped in) are not printed, and a delta of another
// session is not shown.
func TestWatchShowsDeltas(t *testing.T) {
	url := startLedger(t)
	ok(t, url, "start", "--id", "s1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errs := newNotifyBuffer(), newNotifyBuffer()
	done := make(chan int, 1)
	go func() {
		done <- execute(ctx, env{Args: slices.Concat([]string{"--nats", url}, credsArgs(url), []string{"watch", "s1"}), Stdout: out, Stderr: errs})
	}()
	out.await(t, "session started")
	nc := natstest.Connect(t, url)
	send := func(session string, d events.Delta) {
		t.Helper()
		d.Session = session
		b, _ := json.Marshal(d)
		if err := nc.Publish(events.DeltaSubject(events.DefaultTenant, session), b); err != nil {
			t.Fatal(err)
		}
	}
	send("s2", events.Delta{Answer: "a0", Agent: "other", Text: "not this one", Done: true})
	send("s1", events.Delta{Answer: "a1", Agent: "coder", N: 0, Text: "Hello "})
	send("s1", events.Delta{Answer: "a1", Agent: "coder", N: 1, Text: "wor\x1b[31mld\n"})
	send("s1", events.Delta{Answer: "a1", Agent: "coder", N: 2, Tool: &events.DeltaTool{ID: "c1", Name: "run", Arguments: `{"cmd":`}})
	send("s1", events.Delta{Answer: "a1", Agent: "coder", N: 3, Tool: &events.DeltaTool{Arguments: `"ls"}`}, Done: true})
	out.await(t, `    ~  coder: Hello wor[31mld  [tool run {"cmd":"ls"}`+"\n") // the escape character is gone
	ok(t, url, "emit", "s1", events.TypeChunkAppended, "--data", `{"role":"assistant","content":"Hello world"}`)
	out.await(t, "assistant: Hello world")
	if got := out.String(); strings.Contains(got, "\x1b") || strings.Contains(got, "not this one") {
		t.Fatalf("watch printed:\n%q", got)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("watch exited %d: %s", code, errs.String())
	}
}
