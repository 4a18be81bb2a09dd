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
// before, every rathprev must name the previous hash, every event must carry
// a signature of a trusted key, and the head's signature must hold. Since the
// ledger never chains onto an event whose signature it has not checked, the
// head's signature vouches for every event below it; when it fails, the
// first event whose signature fails is found by bisection (events of a log
// written around the ledger fail from the first forged one to the head).
// Events written into the stream behind the ledger's back are caught like
// any other change, even with a correct chain hash.
func (l *Ledger) Verify(ctx context.Context, id string) (api.Report, error) {
	if err := events.ValidateSessionID(id); err != nil {
		return api.Report{}, api.Errorf(api.CodeInvalidSession, "%v", err)
	}
	// The recorded head is read before the log, which it never leads.
	rec, err := l.store.GetHead(ctx, id)
	recorded := err == nil
	if err != nil && !errors.Is(err, eventstore.ErrNotFound) {
		return api.Report{}, unavailable(err)
	}
	segs, err := l.lineageOf(ctx, id)
	if errors.Is(err, api.ErrNotFound) && recorded {
		return api.Report{Session: id, Fault: &api.Fault{Seq: 1, Session: id,
			Reason: fmt.Sprintf("the log of %s is gone: the ledger signed its head at %d (hash %s)", id, rec.Seq, short(rec.Hash))}}, nil
	}
	if err != nil {
		return api.Report{}, err
	}
	r := api.Report{Session: id}
	v := verifier{report: &r}
	for i, seg := range segs {
		end := uint64(0)
		if i+1 < len(segs) {
			end = segs[i+1].From - 1
		}
		v.seg, v.segIndex, v.segs, v.end = seg, i, segs, end
		v.chain.Session = seg.Session // a fork's first event chains onto its parent's
		err := l.scanOwnMsgs(ctx, seg.Session, seg.StreamSeq, 0, func(m eventstore.Msg) error {
			return v.check(ctx, l, m)
		})
		if err != nil && !errors.Is(err, errStop) {
			return api.Report{}, unavailable(err)
		}
		if r.Fault != nil {
			return r, nil
		}
		if next := v.chain.Seq + 1; end != 0 && next <= end {
			r.Fault = &api.Fault{Seq: next, Session: seg.Session, Reason: fmt.Sprintf("missing sequence %d: the log of %s ends before the fork point %d", next, seg.Session, end)}
			return r, nil
		}
	}
	f, err := l.checkSignatures(ctx, v.signed, &r)
	if err != nil {
		return api.Report{}, unavailable(err)
	}
	if f != nil {
		r.Fault = f
		return r, nil
	}
	if recorded {
		if rec.Session == id {
			r.RecordedHead = rec.Seq
		}
		if f := l.checkRecordedHead(rec, v.signed, &r); f != nil {
			if rec.Seq > r.Head {
				// Cut, or read from a replica that lags (a node catching
				// up answered the scan): ask the stream's leader before
				// calling the log cut, as a loading ledger does.
				last, err := l.store.LastFromLeader(ctx, id)
				if err != nil && !errors.Is(err, eventstore.ErrNotFound) {
					return api.Report{}, unavailable(err)
				}
				if err == nil && lastSeq(last) > r.Head {
					return api.Report{}, unavailable(fmt.Errorf("verify %s: the log read ends at %d, but the stream's leader holds %d: a replica lags", id, r.Head, lastSeq(last)))
				}
			}
			r.Fault = f
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
	chain    events.Chain // the one chain walker, across the lineage's segments
	signed   []signedAt   // every checked event, in chain order
}

// signedAt is what a signature of an event covers, and where it is stored.
type signedAt struct {
	session, hash, sig string
	seq, streamSeq     uint64
}

// checkSignatures checks the signature of the last event of each segment of
// the lineage (a fork point, then the head) and, where one fails, finds the
// first event whose signature fails.
func (l *Ledger) checkSignatures(ctx context.Context, evs []signedAt, r *api.Report) (*api.Fault, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	var unreadable error // a signature record that could not be read now
	check := func(e signedAt) error {
		r.Signatures++
		err := l.verifySig(ctx, e.session, e.seq, e.hash, e.sig)
		if err != nil && !events.IsSignatureFault(err) && unreadable == nil {
			unreadable = err
		}
		return err
	}
	head := evs[len(evs)-1]
	// The report carries the head's signature expanded: a client checks it
	// against its pinned key without the record.
	full, err := l.fullSig(ctx, head.sig)
	if err != nil {
		full = head.sig
	}
	r.HeadSig, r.KeyID = full, events.SigKeyID(head.sig)
	lo := 0
	for i, e := range evs {
		if i+1 < len(evs) && evs[i+1].session == e.session {
			continue // not the last event of its segment
		}
		if check(e) != nil {
			f := l.firstBadSignature(evs, lo, i, check)
			if unreadable != nil {
				return nil, unreadable
			}
			return f, nil
		}
		lo = i + 1
	}
	return nil, nil
}

// firstBadSignature bisects evs[lo..hi], whose last signature fails, for the
// first event whose signature fails.
func (l *Ledger) firstBadSignature(evs []signedAt, lo, hi int, check func(signedAt) error) *api.Fault {
	for lo < hi {
		mid := (lo + hi) / 2
		if check(evs[mid]) == nil {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	bad := evs[hi]
	err := check(bad)
	return &api.Fault{Seq: bad.seq, Session: bad.session, StreamSeq: bad.streamSeq,
		Reason: fmt.Sprintf("sequence %d: %v (written around the ledger, or altered and re-hashed)", bad.seq, err)}
}

func (v *verifier) fail(m eventstore.Msg, seq uint64, format string, args ...any) error {
	v.report.Fault = &api.Fault{Seq: seq, Session: v.seg.Session, StreamSeq: m.StreamSeq, Reason: fmt.Sprintf(format, args...)}
	return errStop
}

// check steps the chain walker over the next stored message, then checks
// what only the ledger knows: the subject it is stored on, its signing key,
// a fork's parent, a merge's source.
func (v *verifier) check(ctx context.Context, l *Ledger, m eventstore.Msg) error {
	if v.end != 0 && v.chain.Seq >= v.end {
		return errStop // past the fork point: later events are not in this log
	}
	prev := v.chain.Hash
	ev, err := v.chain.Next(m.Body)
	if f, ok := errors.AsType[*events.ChainFault](err); ok {
		return v.fail(m, f.Seq, "%s", f.Reason)
	}
	if err != nil {
		return v.fail(m, v.chain.Seq+1, "%v", err)
	}
	if sid, _ := events.SessionFromSubject(m.Subject); sid != v.seg.Session {
		return v.fail(m, ev.Seq, "sequence %d stored on subject %s, outside session %s", ev.Seq, m.Subject, v.seg.Session)
	}
	if err := l.keys.Known(ev.Sig); err != nil {
		return v.fail(m, ev.Seq, "sequence %d is %v (written around the ledger)", ev.Seq, err)
	}
	if ev.Seq == v.seg.From && v.segIndex > 0 {
		d, err := ev.Decode()
		f, ok := d.(*events.SessionForked)
		if err != nil || !ok {
			return v.fail(m, ev.Seq, "first event of fork %s is %s, not %s", v.seg.Session, ev.Type, events.TypeSessionForked)
		}
		// The walker checked the fork point and hash; the parent is the lineage's.
		if parent := v.segs[v.segIndex-1].Session; f.Parent != parent {
			return v.fail(m, ev.Seq, "fork record names %s at %d (%s), chain says %s at %d (%s)", f.Parent, f.AtSeq, short(f.ParentHash), parent, ev.Seq-1, short(prev))
		}
	}
	if ev.Type == events.TypeSessionMerged {
		if err := v.checkMerge(ctx, l, m, ev); err != nil {
			return err
		}
	}
	v.signed = append(v.signed, signedAt{session: ev.Session, hash: ev.Hash, sig: ev.Sig, seq: ev.Seq, streamSeq: m.StreamSeq})
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

// checkRecordedHead compares the log with the head the ledger recorded
// apart from it: a log that ends below it was cut (which the chain alone
// cannot show), one that holds another event there was rewritten.
func (l *Ledger) checkRecordedHead(rec eventstore.Head, evs []signedAt, r *api.Report) *api.Fault {
	if err := l.keys.Verify(rec.Session, rec.Seq, rec.Hash, rec.Sig); err != nil {
		return &api.Fault{Seq: rec.Seq, Session: rec.Session, Reason: fmt.Sprintf("the recorded head at %d is %v: the heads bucket %s was written around the ledger", rec.Seq, err, events.BucketHeads)}
	}
	if rec.Seq > r.Head {
		return &api.Fault{Seq: r.Head + 1, Session: rec.Session, Reason: fmt.Sprintf("missing sequences %d..%d: the log ends at %d, but the ledger signed its head at %d (hash %s): the tail was removed or lost", r.Head+1, rec.Seq, r.Head, rec.Seq, short(rec.Hash))}
	}
	for i := len(evs) - 1; i >= 0 && evs[i].session == rec.Session && evs[i].seq >= rec.Seq; i-- {
		if e := evs[i]; e.seq == rec.Seq && e.hash != rec.Hash {
			return &api.Fault{Seq: e.seq, Session: e.session, StreamSeq: e.streamSeq, Reason: fmt.Sprintf("sequence %d has hash %s, but the ledger signed %s there (the log was rewritten)", e.seq, short(e.hash), short(rec.Hash))}
		}
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

// Keys lists the public keys the ledger signs with and accepts.
func (l *Ledger) Keys() (api.Keys, error) {
	var out api.Keys
	if l.cfg.Key != nil { // nil: an unsigned ledger (Config.Unsigned), signing nothing
		out.Current = l.cfg.Key.Public().ID
	}
	for _, k := range l.keys.Keys() {
		pem, err := events.MarshalPublicKey(k)
		if err != nil {
			return api.Keys{}, err
		}
		out.Keys = append(out.Keys, api.Key{ID: k.ID, PublicKey: events.EncodePublicKey(k.Key), PEM: string(pem)})
	}
	return out, nil
}
