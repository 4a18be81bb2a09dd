package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/pkg/eventstore"
)

// states is the process's one cache of folded session states (ADR 0038),
// shared by every service of the runtime that folds sessions (the memory
// service, the selector, the agent worker and the tool runner), so that a
// session is held once however many of them handle it. It is made when the
// first of them starts, on a connection of its own of the selector's role
// (which may read the sessions stream as every worker's does), once the
// ledger created the sessions stream; close drains that connection after
// the services stopped.
type states struct {
	dial dial
	cfg  fold.CacheConfig
	log  *slog.Logger

	// sem is held while the cache is made or closed: a channel, so that a
	// service stopped while waiting for the sessions stream stops waiting.
	sem   chan struct{}
	cache atomic.Pointer[fold.Cache]
	done  func()      // drains the cache's connection; nil until made
	users []auth.Role // the services given the cache, in the order they asked
}

func newStates(d dial, cfg fold.CacheConfig, log *slog.Logger) *states {
	cfg.Shared = true
	return &states{dial: d, cfg: cfg, log: log, sem: make(chan struct{}, 1)}
}

// get returns the cache for the service of role, made on the first call;
// nil and no error when ctx ended first (a service stopped while starting).
func (s *states) get(ctx context.Context, role auth.Role) (*fold.Cache, error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, nil
	}
	defer func() { <-s.sem }()
	if c := s.cache.Load(); c != nil {
		s.users = append(s.users, role)
		return c, nil
	}
	nc, done, err := s.dial(auth.RoleSelector)
	if err != nil {
		return nil, fmt.Errorf("state cache: %w", err)
	}
	store, err := eventstore.AttachWait(ctx, nc, eventstore.WithLogger(s.log))
	if err != nil {
		done()
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, fmt.Errorf("state cache: %w", err)
	}
	s.done, s.users = done, append(s.users, role)
	c := fold.NewCache(store, s.cfg)
	s.cache.Store(c)
	return c, nil
}

// close drains the cache's connection; the services that used it have
// stopped. The cache stays readable (its Stats) but reads nothing more.
func (s *states) close() {
	s.sem <- struct{}{}
	defer func() { <-s.sem }()
	if s.done != nil {
		s.done()
		s.done = nil
	}
}

// given returns the services given the cache so far.
func (s *states) given() []auth.Role {
	s.sem <- struct{}{}
	defer func() { <-s.sem }()
	return slices.Clone(s.users)
}

// with runs the body of the service of role with the process's cache: a
// body given nil (ctx ended while the cache was made) is not run.
func (s *states) with(role auth.Role, run func(ctx context.Context, c *fold.Cache) error) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		c, err := s.get(ctx, role)
		if err != nil || c == nil {
			return err
		}
		return run(ctx, c)
	}
}
