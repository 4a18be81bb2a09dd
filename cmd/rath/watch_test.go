package main

import (
	"bytes"
	"context"
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
