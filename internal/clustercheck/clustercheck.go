// Package clustercheck compares what a ledger acknowledged with what it
// reads back: every acknowledged event must be stored once, where its ack
// put it, and every session's chain must verify. The cluster tests record
// each ack while nodes fail, then Check.
package clustercheck

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/openrath/rath/pkg/client"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Recorder keeps every ack a ledger gave; safe for concurrent use.
type Recorder struct {
	mu   sync.Mutex
	acks map[string][]api.Ack // by session, in the order recorded
	n    int
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{acks: map[string][]api.Ack{}} }

// Acked records an ack: the ledger said the event is stored there.
func (r *Recorder) Acked(a api.Ack) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acks[a.Session] = append(r.acks[a.Session], a)
	r.n++
}

// Len is the number of acks recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// Report is what Check found. Zero Lost, Duplicates and Unverified is a
// pass.
type Report struct {
	Sessions int // sessions read back
	Acked    int // acks recorded
	Read     int // events read back
	// Lost are acknowledged events missing from their session, or stored
	// elsewhere than their ack said (another sequence or hash).
	Lost []string
	// Duplicates are event IDs stored more than once in a session, or
	// acknowledged at two different places.
	Duplicates []string
	// Unverified are sessions whose chain does not verify, or whose
	// verified head is below an acknowledged event.
	Unverified []string
}

// OK reports whether nothing acknowledged was lost or duplicated and every
// chain verifies.
func (r Report) OK() bool {
	return len(r.Lost) == 0 && len(r.Duplicates) == 0 && len(r.Unverified) == 0
}

func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d sessions, %d acks, %d events read back: %d lost, %d duplicates, %d chains not verified",
		r.Sessions, r.Acked, r.Read, len(r.Lost), len(r.Duplicates), len(r.Unverified))
	for _, l := range [][]string{r.Lost, r.Duplicates, r.Unverified} {
		for i, s := range l {
			if i == 10 {
				fmt.Fprintf(&b, "\n  … %d more", len(l)-i)
				break
			}
			b.WriteString("\n  " + s)
		}
	}
	return b.String()
}

// Check reads every session with an ack back through the ledger (its whole
// log, and a verify) and compares it with the acks.
func Check(ctx context.Context, c *client.Client, r *Recorder) (Report, error) {
	r.mu.Lock()
	acks := make(map[string][]api.Ack, len(r.acks))
	for id, l := range r.acks {
		acks[id] = slices.Clone(l)
	}
	rep := Report{Sessions: len(r.acks), Acked: r.n}
	r.mu.Unlock()

	ids := make([]string, 0, len(acks))
	for id := range acks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		log, err := c.Log(ctx, id, client.Range{})
		if err != nil {
			return rep, fmt.Errorf("read back session %s: %w", id, err)
		}
		rep.Read += len(log)
		type place struct {
			seq  uint64
			hash string
		}
		stored := make(map[string]place, len(log))
		for _, ev := range log {
			if _, ok := stored[ev.ID]; ok {
				rep.Duplicates = append(rep.Duplicates, fmt.Sprintf("%s: event %s stored twice (again at %d)", id, ev.ID, ev.Seq))
				continue
			}
			stored[ev.ID] = place{ev.Seq, ev.Hash}
		}
		acked := map[string]api.Ack{}
		var head uint64
		for _, a := range acks[id] {
			head = max(head, a.Seq)
			if prev, ok := acked[a.ID]; ok && (prev.Seq != a.Seq || prev.Hash != a.Hash) {
				rep.Duplicates = append(rep.Duplicates, fmt.Sprintf("%s: event %s acknowledged at %d and at %d", id, a.ID, prev.Seq, a.Seq))
			}
			acked[a.ID] = a
			p, ok := stored[a.ID]
			switch {
			case !ok:
				rep.Lost = append(rep.Lost, fmt.Sprintf("%s: event %s acknowledged at %d is not stored", id, a.ID, a.Seq))
			case p.seq != a.Seq || p.hash != a.Hash:
				rep.Lost = append(rep.Lost, fmt.Sprintf("%s: event %s acknowledged at %d (%s) is stored at %d (%s)", id, a.ID, a.Seq, a.Hash, p.seq, p.hash))
			}
		}
		v, err := c.Verify(ctx, id)
		if err != nil {
			return rep, fmt.Errorf("verify session %s: %w", id, err)
		}
		switch {
		case !v.OK:
			rep.Unverified = append(rep.Unverified, fmt.Sprintf("%s: %+v", id, v.Fault))
		case v.Head < head:
			rep.Unverified = append(rep.Unverified, fmt.Sprintf("%s: verified head %d is below acknowledged %d", id, v.Head, head))
		case v.Head != uint64(len(log)):
			rep.Unverified = append(rep.Unverified, fmt.Sprintf("%s: verified head %d but %d events read back", id, v.Head, len(log)))
		}
	}
	return rep, nil
}
