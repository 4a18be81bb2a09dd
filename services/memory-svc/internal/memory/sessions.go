package memory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
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
	store      *eventstore.Store
	stream     jetstream.Stream
	applied    progress // stream sequence of the last event applied
	synced     progress // every followed event at or below it is applied
	log        *slog.Logger
}

// followed are the subjects Sessions follows.
var followed = []string{events.KindFilter(events.TokenMemory), events.KindFilter(events.TokenLifecycle)}

// FollowSessions starts following RATH_SESSIONS from its first event.
func FollowSessions(ctx context.Context, store *eventstore.Store, log *slog.Logger) (*Sessions, error) {
	st, err := store.JetStream().Stream(ctx, events.StreamSessions)
	if err != nil {
		return nil, fmt.Errorf("follow sessions: %w", err)
	}
	s := &Sessions{recalls: map[string]*recall{}, byItem: map[string][]string{}, forks: map[string][]string{},
		mergedInto: map[string][]string{}, store: store, stream: st, log: log}
	s.f, err = follow(ctx, st, jetstream.OrderedConsumerConfig{FilterSubjects: followed},
		func(m jetstream.Msg, meta *jetstream.MsgMetadata) error {
			s.apply(m.Data())
			// Stream sequences, not the consumer's: an ordered consumer
			// that is reset numbers its deliveries from 1 again, and
			// resumes after the last stream sequence it delivered.
			s.applied.advance(meta.Sequence.Stream)
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
// is applied. It reads the stream's last sequence, then asks the stream's
// leader for the first followed event after what is applied, and waits for
// the follower to apply it, until none is left at or below that sequence.
//
// The consumer's own counts cannot say it: JetStream acknowledges a publish
// before it tells the stream's consumers about the message (nats-server
// v2.15.2 stream.go processJetStreamMsg sends the ack, then queues the
// message on sigq; signalConsumersLoop counts it into each consumer's
// pending on another goroutine), so a consumer's info asked right after an
// append was acknowledged may report nothing pending and nothing more
// delivered. Sync trusted that once, and a provenance answer missed a merge
// the ledger had acknowledged.
func (s *Sessions) Sync(ctx context.Context) error {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("sync with %s: %w", events.StreamSessions, err)
	}
	last := info.State.LastSeq
	for {
		from := max(s.applied.get(), s.synced.get()) + 1
		if from > last {
			break
		}
		next, err := s.nextFollowed(ctx, from)
		if err != nil {
			return fmt.Errorf("sync with %s: %w", events.StreamSessions, err)
		}
		if next == 0 || next > last {
			break
		}
		if err := s.applied.wait(ctx, next); err != nil {
			return fmt.Errorf("sync with %s: %w", events.StreamSessions, err)
		}
	}
	s.synced.advance(last)
	return nil
}

// nextFollowed returns the stream sequence of the first followed event at
// or after from, 0 if there is none.
func (s *Sessions) nextFollowed(ctx context.Context, from uint64) (uint64, error) {
	next := uint64(0)
	for _, filter := range followed {
		m, err := s.store.NextFromLeader(ctx, filter, from)
		if errors.Is(err, eventstore.ErrNotFound) {
			continue
		}
		if err != nil {
			return 0, err
		}
		if next == 0 || m.StreamSeq < next {
			next = m.StreamSeq
		}
	}
	return next, nil
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
