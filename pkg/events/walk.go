package events

import "fmt"

// Chain walks one session's own stored events in log order and checks each
// link: the hash recomputed from the stored body (StoredHash), the sequence
// one after the last, rathprev naming the last hash, the event of the
// chain's session, and a fork record naming the point and the hash its
// event chains onto. It is the one walker of the chain: the ledger's verify
// (through a session's fork ancestry), an archive bundle's check and a
// dossier's offline check all step through it, and check around it only
// what they alone know (subjects, stream order, signatures, a fork's
// parent, merges).
//
// The zero Chain with Session set starts a root session: its first event
// must be sequence 1 without rathprev. To start elsewhere (a fork's own
// events, an archive from its first own sequence), set Seq and Hash to the
// event before.
type Chain struct {
	// Session is the session whose events are walked. A walk through a
	// fork's ancestry sets it to each segment's session in turn, keeping
	// Seq and Hash: the fork's first event chains onto its parent's.
	Session string
	// Seq and Hash are the last event checked (or the one before the
	// first): the next event must be Seq+1 and name Hash as its rathprev.
	Seq  uint64
	Hash string
}

// ChainFault is a break in a chain: the sequence where it is and why. A
// Chain returns it as the error of Next and Link.
type ChainFault struct {
	Seq    uint64
	Reason string
}

// Error returns the reason.
func (f *ChainFault) Error() string { return f.Reason }

// Next parses the next stored body and checks it (Link), returning the
// event.
func (c *Chain) Next(body []byte) (Stored, error) {
	ev, err := ParseStored(body)
	if err != nil {
		return Stored{}, &ChainFault{Seq: c.Seq + 1, Reason: fmt.Sprintf("event does not parse: %v", err)}
	}
	return ev, c.Link(ev)
}

// Link checks the next event, parsed from its stored body (ev.Raw), and on
// success advances the chain to it. A fault leaves the chain where it was.
func (c *Chain) Link(ev Stored) error {
	want := c.Seq + 1
	sum, same, err := StoredHash(ev.Raw, ev.Hash)
	switch {
	case err != nil:
		return &ChainFault{Seq: want, Reason: fmt.Sprintf("event cannot be hashed: %v", err)}
	case !same:
		return &ChainFault{Seq: ev.Seq, Reason: fmt.Sprintf("hash mismatch: stored %s, recomputed %s (event altered)", linkHash(ev.Hash), linkHash(sum))}
	case ev.Seq < want:
		return &ChainFault{Seq: ev.Seq, Reason: fmt.Sprintf("sequence %d appears after %d (event inserted or reordered)", ev.Seq, c.Seq)}
	case ev.Seq > want:
		return &ChainFault{Seq: want, Reason: fmt.Sprintf("missing sequence %d: the next stored event is %d (event removed)", want, ev.Seq)}
	case ev.Prev != c.Hash:
		return &ChainFault{Seq: ev.Seq, Reason: fmt.Sprintf("sequence %d links to %s, the previous hash is %s (event inserted or reordered)", ev.Seq, linkHash(ev.Prev), linkHash(c.Hash))}
	case ev.Session != c.Session:
		return &ChainFault{Seq: ev.Seq, Reason: fmt.Sprintf("sequence %d names session %q, not %s", ev.Seq, ev.Session, c.Session)}
	}
	if ev.Type == TypeSessionForked {
		d, err := ev.Decode()
		if err != nil {
			return &ChainFault{Seq: ev.Seq, Reason: fmt.Sprintf("fork record at %d does not decode: %v", ev.Seq, err)}
		}
		if f := d.(*SessionForked); f.AtSeq != ev.Seq-1 || f.ParentHash != ev.Prev {
			return &ChainFault{Seq: ev.Seq, Reason: fmt.Sprintf("fork record names %d (%s), the chain says %d (%s)", f.AtSeq, linkHash(f.ParentHash), ev.Seq-1, linkHash(ev.Prev))}
		}
	}
	c.Seq, c.Hash = ev.Seq, ev.Hash
	return nil
}

// linkHash is a hash cut for messages (shortHash); "(none)" for none.
func linkHash(h string) string {
	if h == "" {
		return "(none)"
	}
	return shortHash(h)
}
