// Package testrig runs what the tests of Rath's services share on a real
// embedded JetStream (pkg/natstest): a session ledger on a connection of its
// own role, and any service, each until the test ends.
//
// Everything it starts stops in the test's cleanup, in the reverse order of
// starting (testing's cleanups run last first): a service started after the
// ledger stops before the ledger it appends through, and both stop before
// their connections close and the server shuts down. A service that returns
// an error fails the test.
package testrig

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/natstest"
	ledger "github.com/openrath/rath/services/session-ledger/service"
)

// Service is a function a test runs in the background until it ends.
type Service struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error

	mu      sync.Mutex
	stopped bool // by the test, which judges the error itself
}

// Run runs fn in the background until the test ends; the cleanup then
// cancels fn's context, waits for fn to return, and fails the test, naming
// the service, if it returned an error (unless the test stopped it first).
func Run(t testing.TB, name string, fn func(ctx context.Context) error) *Service {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Service{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.err = fn(ctx)
	}()
	t.Cleanup(func() {
		s.mu.Lock()
		byTest := s.stopped
		s.mu.Unlock()
		if err := s.wait(); err != nil && !byTest {
			t.Errorf("%s: %v", s.name, err)
		}
	})
	return s
}

// Stop cancels the service's context and returns what it returned, for a
// test that checks its shutdown itself; stopping it again returns the same.
func (s *Service) Stop() error {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	return s.wait()
}

func (s *Service) wait() error {
	s.cancel()
	<-s.done
	return s.err
}

// quiet discards the ledger's log: a test reads what it stored.
var quiet = slog.New(slog.DiscardHandler)

// Ledger runs a session ledger on the natstest server at url until the test
// ends, on its own connection of the ledger role, as rath up runs it, so a
// permission the ledger lacks fails the test. Its configuration is
// ledger.ConfigIn a temporary directory, its approvers the server's
// credentials directory's (auth.ApproversFile), changed by opts. Start the ledger
// before the services that append through it, so that they stop first.
func Ledger(t testing.TB, url string, opts ...func(*ledger.Config)) *Service {
	t.Helper()
	cfg := ledger.ConfigIn(t.TempDir())
	cfg.ApproversFile = filepath.Join(natstest.CredsDir(t, url), auth.ApproversFile)
	for _, o := range opts {
		o(&cfg)
	}
	nc := natstest.ConnectAs(t, url, auth.RoleLedger)
	return Run(t, "ledger", func(ctx context.Context) error { return ledger.Run(ctx, nc, cfg, quiet) })
}
