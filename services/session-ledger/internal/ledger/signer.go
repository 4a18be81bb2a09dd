package ledger

import (
	"runtime"
	"slices"
	"sync"

	"github.com/openrath/rath/pkg/events"
)

// signer signs the events of concurrent appends in groups (group commit).
// An append that finds no signing under way leads: it yields once, so that
// appends already running can seal and queue theirs, then signs the queue's
// first group (its own event first, up to events.MaxGroup) for itself and
// the others, and hands the lead to the first append still waiting. An
// append alone signs alone and waits for nobody; under load one ed25519
// signature covers up to MaxGroup events, and no append signs more than its
// own group, however long the queue stays full.
type signer struct {
	key *events.SigningKey // nil: sign nothing (an unsigned ledger, Config.Unsigned)

	mu    sync.Mutex
	queue []*signReq
	busy  bool // a leader is signing; it hands over or clears this
}

type signReq struct {
	leaf events.Leaf
	done chan signed   // the request's rathsig
	lead chan struct{} // closed to hand this request the lead
}

// signed is a rathsig, or why the key did not sign (an external signer
// that failed: events.NewSigner).
type signed struct {
	sig string
	err error
}

// sign returns the rathsig of one event.
func (s *signer) sign(leaf events.Leaf) (string, error) {
	if s.key == nil {
		return "", nil
	}
	r := &signReq{leaf: leaf, done: make(chan signed, 1), lead: make(chan struct{})}
	s.mu.Lock()
	s.queue = append(s.queue, r)
	if s.busy {
		s.mu.Unlock()
		select {
		case d := <-r.done:
			return d.sig, d.err
		case <-r.lead: // r heads the queue now
		}
	} else {
		s.busy = true // the queue was empty: r heads it
		s.mu.Unlock()
		runtime.Gosched()
	}
	s.mu.Lock()
	group := s.queue[:min(len(s.queue), events.MaxGroup)]
	s.queue = s.queue[len(group):]
	s.mu.Unlock()
	leaves := make([]events.Leaf, len(group))
	for i, g := range group {
		leaves[i] = g.leaf
	}
	sigs, err := s.key.SignGroup(leaves)
	for i := range group {
		if err != nil {
			group[i].done <- signed{err: err}
		} else {
			group[i].done <- signed{sig: sigs[i]}
		}
	}
	s.mu.Lock()
	if len(s.queue) > 0 {
		close(s.queue[0].lead)
	} else {
		s.busy = false
	}
	s.mu.Unlock()
	d := <-r.done
	return d.sig, d.err
}

// signAll signs the events of one append: one event joins the concurrent
// appends' group (sign); several, sealed together (an atomic append), are
// signed in groups of their own.
func (s *signer) signAll(leaves []events.Leaf) ([]string, error) {
	if s.key == nil {
		return make([]string, len(leaves)), nil
	}
	if len(leaves) == 1 {
		sig, err := s.sign(leaves[0])
		if err != nil {
			return nil, err
		}
		return []string{sig}, nil
	}
	out := make([]string, 0, len(leaves))
	for len(leaves) > 0 {
		n := min(len(leaves), events.MaxGroup)
		sigs, err := s.key.SignGroup(leaves[:n])
		if err != nil {
			return nil, err
		}
		out = append(out, sigs...)
		leaves = leaves[n:]
	}
	return out, nil
}

// roundSigs are the signatures of a batch round: the records to store
// before any of the round's events, and for each event the rathsig its
// stored body carries (a reference, when it is signed in a record) and the
// index in records of its record (-1: none).
type roundSigs struct {
	records []events.RecordSigs
	stored  []string
	record  []int
}

// signRound signs the events of a batch round: groups of events.MinRecord
// or more with a signature record each (their stored rathsig is a short
// reference, ADR 0014), a smaller remainder inline.
func (s *signer) signRound(leaves []events.Leaf) (roundSigs, error) {
	var r roundSigs
	if s.key == nil {
		r.stored = make([]string, len(leaves))
		r.record = slices.Repeat([]int{-1}, len(leaves))
		return r, nil
	}
	for len(leaves) > 0 {
		n := min(len(leaves), events.MaxRecord)
		if n < events.MinRecord {
			sigs, err := s.key.SignGroup(leaves[:n])
			if err != nil {
				return roundSigs{}, err
			}
			r.stored = append(r.stored, sigs...)
			r.record = append(r.record, slices.Repeat([]int{-1}, n)...)
		} else {
			rec, err := s.key.SignRecord(leaves[:n])
			if err != nil {
				return roundSigs{}, err
			}
			r.record = append(r.record, slices.Repeat([]int{len(r.records)}, n)...)
			r.records = append(r.records, rec)
			r.stored = append(r.stored, rec.Refs...)
		}
		leaves = leaves[n:]
	}
	return r, nil
}
