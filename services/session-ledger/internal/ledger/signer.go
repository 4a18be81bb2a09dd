package ledger

import (
	"runtime"
	"sync"

	"github.com/openrath/rath/pkg/events"
)

// signer signs the events of concurrent appends in groups (group commit):
// the caller that finds no signing under way signs everything queued, up to
// events.MaxGroup at a time, for itself and the others, and keeps going
// while more arrive. An append that finds the signer idle signs alone and
// waits for nobody; under load one ed25519 signature covers up to
// MaxGroup events.
type signer struct {
	key *events.SigningKey

	mu    sync.Mutex
	queue []*signReq
	busy  bool
}

type signReq struct {
	leaf events.Leaf
	done chan string
}

// sign returns the rathsig of one event.
func (s *signer) sign(leaf events.Leaf) string {
	r := &signReq{leaf: leaf, done: make(chan string, 1)}
	s.mu.Lock()
	s.queue = append(s.queue, r)
	if s.busy {
		s.mu.Unlock()
		return <-r.done
	}
	s.busy = true
	// Let the appends already running seal theirs first, so that they join
	// this group instead of each signing alone (on few cores they cannot
	// enqueue while this one holds the processor).
	s.mu.Unlock()
	runtime.Gosched()
	s.mu.Lock()
	for len(s.queue) > 0 {
		group := s.queue[:min(len(s.queue), events.MaxGroup)]
		s.queue = s.queue[len(group):]
		s.mu.Unlock()
		leaves := make([]events.Leaf, len(group))
		for i, g := range group {
			leaves[i] = g.leaf
		}
		for i, sig := range s.key.SignGroup(leaves) {
			group[i].done <- sig
		}
		s.mu.Lock()
	}
	s.busy = false
	s.mu.Unlock()
	return <-r.done
}

// signAll signs events sealed together (a round of a batch) in groups.
func (s *signer) signAll(leaves []events.Leaf) []string {
	out := make([]string, 0, len(leaves))
	for len(leaves) > 0 {
		n := min(len(leaves), events.MaxGroup)
		out = append(out, s.key.SignGroup(leaves[:n])...)
		leaves = leaves[n:]
	}
	return out
}
