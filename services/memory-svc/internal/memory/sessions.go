package memory

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/pkg/events"
)

// recall is one rath.memory.recalled event as stored in a session.
type recall struct {
	eventID string
	session string // the session it is stored in
	seq     uint64
	query   string
	agent   string
	turnID  string
	items   []events.MemoryItemRef
}

// Sessions follows the memory and lifecycle events of every session in
// RATH_SESSIONS: the recall events (who recalled which item versions) and
// the fork and merge graph. It finds the candidates of a provenance
// question; the ledger's fold of each candidate decides it, so the answer
// is the session logs' own (see Memory.Readers).
type Sessions struct {
	mu         sync.RWMutex
	recalls    map[string]*recall  // by event ID
	byItem     map[string][]string // item ID → recall event IDs, in stream order
	forks      map[string][]string // parent → forks
	mergedInto map[string][]string // merge source → targets
	f          *follower
	seen       progress // consumer sequence applied
	log        *slog.Logger
}

// FollowSessions starts following RATH_SESSIONS from its first event.
func FollowSessions(ctx context.Context, nc *nats.Conn, log *slog.Logger) (*Sessions, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("follow sessions: %w", err)
	}
	st, err := js.Stream(ctx, events.StreamSessions)
	if err != nil {
		return nil, fmt.Errorf("follow sessions: %w", err)
	}
	s := &Sessions{recalls: map[string]*recall{}, byItem: map[string][]string{}, forks: map[string][]string{},
		mergedInto: map[string][]string{}, log: log}
	s.f, err = follow(ctx, st, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.KindFilter(events.TokenMemory), events.KindFilter(events.TokenLifecycle)},
	}, func(m jetstream.Msg, meta *jetstream.MsgMetadata) error {
		s.apply(m.Data())
		s.seen.set(meta.Sequence.Consumer)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Wait returns when the follower stopped.
func (s *Sessions) Wait() error { return s.f.wait() }

// apply records one stored event. An event it cannot read is logged and
// skipped: the ledger validated it, so it is a newer kind or data this
// version does not know, and provenance answers are checked against the
// ledger's fold anyway.
func (s *Sessions) apply(body []byte) {
	ev, err := events.ParseStored(body)
	if err != nil {
		s.log.Warn("memory: unreadable session event skipped", "err", err)
		return
	}
	switch ev.Type {
	case events.TypeMemoryRecalled, events.TypeSessionForked, events.TypeSessionMerged:
	default:
		return
	}
	data, err := ev.Decode()
	if err != nil {
		s.log.Warn("memory: undecodable session event skipped", "session", ev.Session, "seq", ev.Seq, "err", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch d := data.(type) {
	case *events.MemoryRecalled:
		if _, dup := s.recalls[ev.ID]; dup {
			return
		}
		s.recalls[ev.ID] = &recall{eventID: ev.ID, session: ev.Session, seq: ev.Seq, query: d.Query, agent: d.Agent, turnID: d.TurnID, items: d.Items}
		for _, it := range d.Items {
			if ids := s.byItem[it.ItemID]; !slices.Contains(ids, ev.ID) {
				s.byItem[it.ItemID] = append(ids, ev.ID)
			}
		}
	case *events.SessionForked:
		s.forks[d.Parent] = appendNew(s.forks[d.Parent], ev.Session)
	case *events.SessionMerged:
		s.mergedInto[d.Source] = appendNew(s.mergedInto[d.Source], ev.Session)
		// A merge takes in segments of other sessions too (the source's
		// ancestors, what was merged into it): each can reach the target.
		for _, seg := range d.Segments {
			s.mergedInto[seg.Session] = appendNew(s.mergedInto[seg.Session], ev.Session)
		}
	}
}

func appendNew(list []string, v string) []string {
	if slices.Contains(list, v) {
		return list
	}
	return append(list, v)
}

// Sync returns once every memory and lifecycle event stored before the call
// is applied: the server's consumer has nothing pending and everything it
// delivered is applied.
func (s *Sessions) Sync(ctx context.Context) error {
	for {
		wake := s.seen.changed()
		info, err := s.f.cons.Info(ctx)
		if err != nil {
			return fmt.Errorf("sync with %s: %w", events.StreamSessions, err)
		}
		if info.NumPending == 0 && s.seen.get() >= info.Delivered.Consumer {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		}
	}
}

// recallsOf returns the recall events naming an item.
func (s *Sessions) recallsOf(itemID string) []recall {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []recall
	for _, id := range s.byItem[itemID] {
		out = append(out, *s.recalls[id])
	}
	return out
}

// recallByID returns a recall event.
func (s *Sessions) recallByID(eventID string) (recall, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, ok := s.recalls[eventID]
	if !ok {
		return recall{}, false
	}
	return *r, true
}

// reach returns every session whose log may hold events of session from:
// its forks and the targets of merges taking in its events, transitively
// (from itself excluded). It over-approximates: a fork made before the
// event does not hold it; the ledger's fold decides.
func (s *Sessions) reach(from string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	seen := map[string]bool{from: true}
	queue := []string{from}
	var out []string
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, next := range append(slices.Clone(s.forks[cur]), s.mergedInto[cur]...) {
			if !seen[next] {
				seen[next] = true
				out = append(out, next)
				queue = append(queue, next)
			}
		}
	}
	slices.Sort(out)
	return out
}
