package main_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/proctest"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/natstest"
)

// The ledger binary is built once per test binary, on first use, so that
// `go test -short` builds nothing.
var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// ledgerBinary returns the path of the session-ledger binary built from this
// package's directory (the test's working directory).
func ledgerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "rath-ledger-bin-")
		if buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "session-ledger")
		buildErr = proctest.Build(buildDir, ".")
	})
	if buildErr != nil {
		t.Fatalf("build session-ledger: %v", buildErr)
	}
	return buildBin
}

// ledgerProc is one session-ledger OS process.
type ledgerProc struct {
	name   string
	cmd    *exec.Cmd
	stderr *proctest.LogBuffer
	exited chan struct{} // closed once Wait returned
	err    error         // Wait's result, valid after exited
}

// keyFiles holds each test's signing key file: the ledgers of one test share
// it, as the ledgers of one deployment do.
var keyFiles sync.Map // *testing.T → string

func keyFileOf(t *testing.T) string {
	if f, ok := keyFiles.Load(t); ok {
		return f.(string)
	}
	f, _ := keyFiles.LoadOrStore(t, filepath.Join(t.TempDir(), "ledger.key"))
	t.Cleanup(func() { keyFiles.Delete(t) })
	return f.(string)
}

// startLedger runs a ledger process against url and waits until it logs that
// it is serving. The process is killed at the end of the test if it still runs.
func startLedger(t *testing.T, url, name string, extra ...string) *ledgerProc {
	t.Helper()
	args := append([]string{"--nats", url, "--creds", natstest.CredsFile(t, url, auth.RoleLedger), "--name", name, "--snapshot-every", "8", "--key", keyFileOf(t)}, extra...)
	p := &ledgerProc{name: name, stderr: &proctest.LogBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(ledgerBinary(t), args...)
	p.cmd.Stderr = p.stderr
	p.cmd.Env = append(os.Environ(), "RATH_NATS_URL=", "RATH_CREDS=") // only the flags count
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start ledger %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		p.checkLog(t)
		if dir := os.Getenv("RATH_TEST_LEDGER_LOGS"); dir != "" {
			// Keep the whole stderr of every ledger process for a post-mortem.
			f := filepath.Join(dir, fmt.Sprintf("%s-%s-%d.log", t.Name(), name, p.cmd.Process.Pid))
			if err := os.WriteFile(f, []byte(p.stderr.String()), 0o644); err != nil {
				t.Logf("keep ledger log: %v", err)
			}
		}
		if t.Failed() {
			t.Logf("stderr of ledger %s (pid %d):\n%s", name, p.cmd.Process.Pid, tail(p.stderr.String(), 40))
		}
	})
	testrig.Eventually(t, 30*time.Second, "ledger "+name+" serving", func() (bool, string) {
		select {
		case <-p.exited:
			t.Fatalf("ledger %s exited before serving: %v\n%s", name, p.err, p.stderr.String())
		default:
		}
		return strings.Contains(p.stderr.String(), `"msg":"ledger serving"`), "no \"ledger serving\" line yet"
	})
	return p
}

// checkLog fails the test on a data race or an error logged by the child.
func (p *ledgerProc) checkLog(t *testing.T) {
	t.Helper()
	out := p.stderr.String()
	if strings.Contains(out, "WARNING: DATA RACE") {
		t.Errorf("ledger %s reported a data race:\n%s", p.name, out)
	}
	if strings.Contains(out, `"level":"ERROR"`) {
		t.Errorf("ledger %s logged an error:\n%s", p.name, tail(out, 40))
	}
}

// kill9 kills the process with SIGKILL and reaps it.
func (p *ledgerProc) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill -9 ledger %s: %v", p.name, err)
	}
	<-p.exited
}

// terminate sends SIGTERM and waits (bounded) for a clean exit.
func (p *ledgerProc) terminate(t *testing.T, within time.Duration) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM ledger %s: %v", p.name, err)
	}
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case <-p.exited:
	case <-timer.C:
		t.Fatalf("ledger %s did not exit within %s of SIGTERM (a hang on shutdown)\n%s", p.name, within, tail(p.stderr.String(), 40))
	}
	if p.err != nil {
		t.Fatalf("ledger %s exited uncleanly after SIGTERM: %v\n%s", p.name, p.err, tail(p.stderr.String(), 40))
	}
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = append([]string{fmt.Sprintf("... (%d lines before)", len(parts)-lines)}, parts[len(parts)-lines:]...)
	}
	return strings.Join(parts, "\n")
}

// bus is the test's view of the embedded server: a client for the ledger
// protocol and a JetStream handle to observe the streams directly.
type bus struct {
	url string
	c   *client.Client
	js  jetstream.JetStream
}

// startBus runs an embedded JetStream and creates Rath's streams, so that
// proposals can be published before any ledger runs.
func startBus(t *testing.T) *bus {
	t.Helper()
	ns := natstest.StartServer(t, t.TempDir())
	nc := natstest.Connect(t, ns.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := eventstore.Open(ctx, nc, eventstore.DefaultConfig()); err != nil {
		t.Fatalf("create streams: %v", err)
	}
	c, err := client.New(nc, client.WithTimeout(10*time.Second), client.WithRetryFor(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &bus{url: ns.ClientURL(), c: c, js: js}
}

// storedCount is the number of events in the sessions stream.
func (b *bus) storedCount(t *testing.T) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := b.js.Stream(ctx, events.StreamSessions)
	if err != nil {
		t.Fatalf("sessions stream: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("sessions stream info: %v", err)
	}
	return info.State.Msgs
}

// inboxState returns the inbox stream's message count (a work queue: a
// proposal leaves it when a ledger acks it) and the inbox consumer's info.
func (b *bus) inboxState(t *testing.T) (uint64, *jetstream.ConsumerInfo) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := b.js.Stream(ctx, events.StreamInbox)
	if err != nil {
		t.Fatalf("inbox stream: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("inbox stream info: %v", err)
	}
	ci, err := s.Consumer(ctx, events.InboxConsumer)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return info.State.Msgs, nil
	}
	if err != nil {
		t.Fatalf("inbox consumer: %v", err)
	}
	cinfo, err := ci.Info(ctx)
	if err != nil {
		t.Fatalf("inbox consumer info: %v", err)
	}
	return info.State.Msgs, cinfo
}

// waitInboxDecided waits until every proposal published to the inbox has
// been decided and acked, and returns how long that took.
func (b *bus) waitInboxDecided(t *testing.T, timeout time.Duration) time.Duration {
	t.Helper()
	return testrig.Eventually(t, timeout, "inbox decided", func() (bool, string) {
		msgs, ci := b.inboxState(t)
		if ci == nil {
			return false, fmt.Sprintf("%d proposals in the inbox, no consumer yet", msgs)
		}
		state := fmt.Sprintf("%d proposals in the inbox, %d undelivered, %d delivered and unacked, %d redelivered",
			msgs, ci.NumPending, ci.NumAckPending, ci.NumRedelivered)
		return msgs == 0 && ci.NumPending == 0 && ci.NumAckPending == 0, state
	})
}

// readLog reads a session's whole log through the ledger, page by page.
func (b *bus) readLog(t *testing.T, id string) []events.Stored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const page = 16 // small pages, so paging itself is exercised
	var out []events.Stored
	for from := uint64(1); ; {
		evs, err := b.c.Log(ctx, id, client.Range{From: from, Limit: page})
		if err != nil {
			t.Fatalf("log of %s from %d: %v", id, from, err)
		}
		out = append(out, evs...)
		if len(evs) < page {
			return out
		}
		from = evs[len(evs)-1].Seq + 1
	}
}

// checkChain asserts a log is numbered 1..N without gaps, each event chains
// onto the one before, no event ID appears twice, and the ledger's own
// verification agrees. It returns the position (1-based) of each event ID.
func (b *bus) checkChain(t *testing.T, id string, log []events.Stored) map[string]uint64 {
	t.Helper()
	pos := make(map[string]uint64, len(log))
	for i, ev := range log {
		if ev.Seq != uint64(i+1) {
			t.Errorf("session %s: log[%d] has seq %d, want %d (gap or reorder)", id, i, ev.Seq, i+1)
		}
		if i > 0 && ev.Prev != log[i-1].Hash {
			t.Errorf("session %s: seq %d does not chain onto seq %d", id, ev.Seq, log[i-1].Seq)
		}
		if ev.Session != id {
			t.Errorf("session %s: log[%d] belongs to session %q", id, i, ev.Session)
		}
		if at, dup := pos[ev.ID]; dup {
			t.Errorf("session %s: event %s stored twice, at seq %d and %d", id, ev.ID, at, ev.Seq)
		}
		pos[ev.ID] = ev.Seq
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := b.c.Verify(ctx, id)
	if err != nil {
		t.Fatalf("verify %s: %v", id, err)
	}
	if !rep.OK {
		t.Errorf("verify %s: fault %+v", id, rep.Fault)
	}
	if rep.Head != uint64(len(log)) {
		t.Errorf("verify %s: head %d, log has %d events", id, rep.Head, len(log))
	}
	return pos
}

// rejections returns the recorded rejections of all sessions.
func (b *bus) rejections(t *testing.T) []eventstore.Rejection {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []eventstore.Rejection
	if err := b.c.Rejections(ctx, "", func(r eventstore.Rejection) error {
		out = append(out, r)
		return nil
	}); err != nil {
		t.Fatalf("read rejections: %v", err)
	}
	return out
}

func chunk(text string) *events.ChunkAppended {
	return &events.ChunkAppended{Role: events.RoleAssistant, Agent: "coder", Content: text}
}
