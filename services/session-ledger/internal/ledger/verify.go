package ledger

import (
	"context"
	"errors"
	"fmt"
	api "github.com/openrath/rath/pkg/ledgerapi"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
)

// Verify recomputes the chain of a session through its fork ancestry straight
// from the stream, trusting no cache, index or snapshot for the events
// themselves: every hash is recomputed, every sequence must follow the one
// before, every rathprev must name the previous hash. Events written into the
// stream behind the ledger's back are caught like any other change.
func (l *Ledger) Verify(ctx context.Context, id string) (api.Report, error) {
	if err := events.ValidateSessionID(id); err != nil {
		return api.Report{}, api.Errorf(api.CodeInvalidSession, "%v", err)
	}
	segs, err := l.lineageOf(ctx, id)
	if err != nil {
		return api.Report{}, err
	}
	r := api.Report{Session: id}
	v := verifier{report: &r, next: 1}
	for i, seg := range segs {
		end := uint64(0)
		if i+1 < len(segs) {
			end = segs[i+1].From - 1
		}
		v.seg, v.segIndex, v.segs, v.end = seg, i, segs, end
		err := l.scanOwnMsgs(ctx, seg.Session, seg.StreamSeq, 0, func(m eventstore.Msg) error {
			return v.check(ctx, l, m)
		})
		if err != nil && !errors.Is(err, errStop) {
			return api.Report{}, unavailable(err)
		}
		if r.Fault != nil {
			return r, nil
		}
		if end != 0 && v.next <= end {
			r.Fault = &api.Fault{Seq: v.next, Session: seg.Session, Reason: fmt.Sprintf("missing sequence %d: the log of %s ends before the fork point %d", v.next, seg.Session, end)}
			return r, nil
		}
	}
	// A snapshot beyond the last event proves events were removed from the tail.
	k := l.cfg.SnapshotEvery
	last := segs[len(segs)-1]
	if after := (r.Head/k + 1) * k; after >= last.From {
		if snap, err := l.store.GetSnapshot(ctx, id, after); err == nil {
			r.Fault = &api.Fault{Seq: r.Head + 1, Session: id, Reason: fmt.Sprintf("missing sequence %d: a snapshot at %d (hash %s) shows the log was truncated", r.Head+1, after, snap.Hash)}
			return r, nil
		}
	}
	r.OK = true
	return r, nil
}

type verifier struct {
	report   *api.Report
	seg      segment
	segIndex int
	segs     []segment
	end      uint64
	next     uint64
	prev     string
}

func (v *verifier) fail(m eventstore.Msg, seq uint64, format string, args ...any) error {
	v.report.Fault = &api.Fault{Seq: seq, Session: v.seg.Session, StreamSeq: m.StreamSeq, Reason: fmt.Sprintf(format, args...)}
	return errStop
}

func (v *verifier) check(ctx context.Context, l *Ledger, m eventstore.Msg) error {
	if v.end != 0 && v.next > v.end {
		return errStop // past the fork point: later events are not in this log
	}
	ev, err := events.ParseStored(m.Body)
	if err != nil {
		return v.fail(m, v.next, "event at stream %d does not parse: %v", m.StreamSeq, err)
	}
	sum, err := events.ComputeHash(m.Body)
	if err != nil {
		return v.fail(m, v.next, "event at stream %d cannot be hashed: %v", m.StreamSeq, err)
	}
	switch {
	case sum != ev.Hash:
		return v.fail(m, ev.Seq, "hash mismatch at sequence %d: stored %s, recomputed %s (event altered)", ev.Seq, short(ev.Hash), short(sum))
	case ev.Seq < v.next:
		return v.fail(m, ev.Seq, "sequence %d appears after %d (event inserted or reordered)", ev.Seq, v.next-1)
	case ev.Seq > v.next:
		return v.fail(m, v.next, "missing sequence %d: next stored event is %d (event removed)", v.next, ev.Seq)
	case ev.Prev != v.prev:
		return v.fail(m, ev.Seq, "sequence %d links to %s, previous hash is %s (event inserted or reordered)", ev.Seq, short(ev.Prev), short(v.prev))
	case ev.Session != v.seg.Session:
		return v.fail(m, ev.Seq, "sequence %d names session %q but is stored under %s", ev.Seq, ev.Session, v.seg.Session)
	}
	if sid, _ := events.SessionFromSubject(m.Subject); sid != v.seg.Session {
		return v.fail(m, ev.Seq, "sequence %d stored on subject %s, outside session %s", ev.Seq, m.Subject, v.seg.Session)
	}
	if ev.Seq == v.seg.From && v.segIndex > 0 {
		d, err := ev.Decode()
		f, ok := d.(*events.SessionForked)
		if err != nil || !ok {
			return v.fail(m, ev.Seq, "first event of fork %s is %s, not %s", v.seg.Session, ev.Type, events.TypeSessionForked)
		}
		if parent := v.segs[v.segIndex-1].Session; f.Parent != parent || f.AtSeq != ev.Seq-1 || f.ParentHash != v.prev {
			return v.fail(m, ev.Seq, "fork record names %s at %d (%s), chain says %s at %d (%s)", f.Parent, f.AtSeq, short(f.ParentHash), parent, ev.Seq-1, short(v.prev))
		}
	}
	if ev.Type == events.TypeSessionMerged {
		if err := v.checkMerge(ctx, l, m, ev); err != nil {
			return err
		}
	}
	v.prev, v.next = ev.Hash, ev.Seq+1
	v.report.Head, v.report.HeadHash = ev.Seq, ev.Hash
	v.report.Checked++
	return nil
}

// checkMerge checks that a merge's recorded source head is really in the
// source's log (the source's own chain is verified when it is verified).
func (v *verifier) checkMerge(ctx context.Context, l *Ledger, m eventstore.Msg, ev events.Stored) error {
	d, err := ev.Decode()
	if err != nil {
		return v.fail(m, ev.Seq, "merge at %d does not decode: %v", ev.Seq, err)
	}
	md := d.(*events.SessionMerged)
	at, err := l.eventAt(ctx, md.Source, md.SourceHead.Seq)
	if err != nil {
		return v.fail(m, ev.Seq, "merge at %d names %s at %d, which cannot be read: %v", ev.Seq, md.Source, md.SourceHead.Seq, err)
	}
	if at.Hash != md.SourceHead.Hash {
		return v.fail(m, ev.Seq, "merge at %d names %s at %d with hash %s, the source has %s", ev.Seq, md.Source, md.SourceHead.Seq, short(md.SourceHead.Hash), short(at.Hash))
	}
	return nil
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	if h == "" {
		return "(none)"
	}
	return h
}
