package ledger

import (
	"context"
	api "github.com/openrath/rath/pkg/ledgerapi"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// Merge appends a session.merged event to Target that takes in every event
// of Source's logical log whose content Target does not hold yet: not the
// shared fork ancestry, not what an earlier merge (direct, or through another
// session) took in. Nothing is applied twice, so usage is not double-counted.
// See docs/protocol.md for the semantics.
func (l *Ledger) Merge(ctx context.Context, req api.MergeRequest) (api.Ack, error) {
	for _, id := range []string{req.Target, req.Source} {
		if err := events.ValidateSessionID(id); err != nil {
			return api.Ack{}, api.Errorf(api.CodeInvalidSession, "%v", err)
		}
	}
	if req.Target == req.Source {
		return api.Ack{}, api.Errorf(api.CodeNothingToMerge, "cannot merge session %s into itself", req.Target)
	}
	src, err := l.head(ctx, req.Source)
	if err != nil {
		return api.Ack{}, err
	}
	// The target is admitted where the merge event is appended.
	if err := admit(ctx, src, req.Source, ""); err != nil {
		return api.Ack{}, err
	}
	srcSegs, err := l.lineageOf(ctx, req.Source)
	if err != nil {
		return api.Ack{}, err
	}
	opts := []events.Option{events.WithSource(sourceOr(req.EventSource))}
	if req.EventID != "" {
		opts = append(opts, events.WithID(req.EventID))
	}
	ev, err := events.New(req.Target, &events.SessionMerged{Source: req.Source}, opts...)
	if err != nil {
		return api.Ack{}, api.Errorf(api.CodeMalformed, "%v", err)
	}
	a, err := l.append(ctx, ev, func(ctx context.Context, st *session.State, ev *event.Event) error {
		dstSegs, err := l.lineageOf(ctx, req.Target)
		if err != nil {
			return err
		}
		ancestor := commonAncestor(dstSegs, st.Seq, srcSegs, src.Seq)
		take := uncovered(st, runsUpTo(srcSegs, src.Seq))
		if len(take) == 0 {
			return api.Errorf(api.CodeNothingToMerge, "%s holds every event of %s up to its head %d already", req.Target, req.Source, src.Seq)
		}
		var anc *events.Position
		if ancestor.Seq > 0 {
			at, err := l.eventAt(ctx, req.Source, ancestor.Seq)
			if err != nil {
				return err
			}
			ancestor.Hash = at.Hash
			anc = &ancestor
		}
		data := &events.SessionMerged{
			Source:     req.Source,
			SourceHead: events.Position{Session: req.Source, Seq: src.Seq, Hash: src.Hash},
			Ancestor:   anc,
			Segments:   take,
			Reason:     req.Reason,
		}
		if err := ev.SetData(event.ApplicationJSON, data); err != nil {
			return api.Errorf(api.CodeMalformed, "%v", err)
		}
		return nil
	})
	if err == nil && a.Duplicate && a.Session != req.Target {
		return api.Ack{}, duplicateID(a)
	}
	return a, err
}

// commonAncestor returns the last position two logical logs share: the end
// of their longest common run of segments.
func commonAncestor(a []segment, aHead uint64, b []segment, bHead uint64) events.Position {
	var pos events.Position
	for i := 0; i < len(a) && i < len(b) && a[i].Session == b[i].Session; i++ {
		end := func(s []segment, head uint64) uint64 {
			if i+1 < len(s) {
				return s[i+1].From - 1
			}
			return head
		}
		pos = events.Position{Session: a[i].Session, Seq: min(end(a, aHead), end(b, bHead))}
		if i+1 >= len(a) || i+1 >= len(b) || a[i+1].Session != b[i+1].Session {
			break
		}
	}
	return pos
}

// runsUpTo splits a logical log up to head into runs of each session's own
// events.
func runsUpTo(segs []segment, head uint64) []events.Segment {
	var out []events.Segment
	for i, s := range segs {
		end := head
		if i+1 < len(segs) {
			end = segs[i+1].From - 1
		}
		lo := max(1, s.From)
		if lo > end {
			continue
		}
		out = append(out, events.Segment{Session: s.Session, From: lo, To: end})
	}
	return out
}

// uncovered removes from runs every event whose content st holds already.
func uncovered(st *session.State, runs []events.Segment) []events.Segment {
	var out []events.Segment
	for _, r := range runs {
		for seq := r.From; seq <= r.To; seq++ {
			if st.Covers(r.Session, seq) {
				continue
			}
			if n := len(out); n > 0 && out[n-1].Session == r.Session && out[n-1].To+1 == seq {
				out[n-1].To = seq
			} else {
				out = append(out, events.Segment{Session: r.Session, From: seq, To: seq})
			}
		}
	}
	return out
}
