package testrig

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// WaitFor watches session id until an event of type typ is stored (or was
// already) and returns the first; it fails the test after a minute.
func WaitFor(t testing.TB, c *client.Client, id, typ string) events.Stored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got events.Stored
	found := errors.New("found")
	if err := c.Watch(ctx, id, func(ev events.Stored) error {
		if ev.Type == typ {
			got = ev
			return found
		}
		return nil
	}); !errors.Is(err, found) {
		t.Fatalf("waiting for %s in %s: %v", typ, id, err)
	}
	return got
}

// LogWatch is a log (an io.Writer for a slog handler) that closes Seen
// once a line contains Want: a test waits on a service's log line instead
// of sleeping.
type LogWatch struct {
	want string
	seen chan struct{}
	mu   sync.Mutex
	buf  strings.Builder
	once sync.Once
}

// NewLogWatch watches for a line containing want.
func NewLogWatch(want string) *LogWatch {
	return &LogWatch{want: want, seen: make(chan struct{})}
}

// Seen is closed once a line contained the text watched for.
func (w *LogWatch) Seen() <-chan struct{} { return w.seen }

func (w *LogWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(string(p), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// String is the whole log so far.
func (w *LogWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// Eventually polls cond until it holds or timeout passes, failing the test
// with what and cond's last state then, and returns how long it took. For
// conditions no event announces (a process's registration, a count across
// processes); a session's event is awaited with WaitFor.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s (last state: %s)", what, timeout, state)
		}
		time.Sleep(10 * time.Millisecond) // pacing the polls
	}
}
