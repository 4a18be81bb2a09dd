package ledger

import (
	"context"
	api "github.com/openrath/rath/pkg/ledgerapi"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// Merge appends a session.merged event to Target that takes in Source's
// events after their common ancestor (or after what an earlier merge of the
// same source already took in). The shared prefix is never applied twice, so
// usage is not double-counted. See docs/protocol.md for the semantics.
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
	return l.append(ctx, ev, func(ctx context.Context, st *session.State, ev *event.Event) error {
		dstSegs, err := l.lineageOf(ctx, req.Target)
		if err != nil {
			return err
		}
		ancestor := commonAncestor(dstSegs, st.Seq, srcSegs, src.Seq)
		base := ancestor.Seq
		for _, m := range st.Lineage.Merges {
			if m.Source == req.Source && m.SourceSeq > base {
				base = m.SourceSeq // taken in by an earlier merge
			}
		}
		if base >= src.Seq {
			return api.Errorf(api.CodeNothingToMerge, "%s has nothing after %d that %s lacks (head %d)", req.Source, base, req.Target, src.Seq)
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
			Segments:   segmentsAfter(srcSegs, base, src.Seq),
			Reason:     req.Reason,
		}
		if err := ev.SetData(event.ApplicationJSON, data); err != nil {
			return api.Errorf(api.CodeMalformed, "%v", err)
		}
		return nil
	})
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

// segmentsAfter splits the logical log range (base, head] into runs of each
// session's own events.
func segmentsAfter(segs []segment, base, head uint64) []events.Segment {
	var out []events.Segment
	for i, s := range segs {
		end := head
		if i+1 < len(segs) {
			end = segs[i+1].From - 1
		}
		lo := max(base+1, s.From)
		if lo > end {
			continue
		}
		out = append(out, events.Segment{Session: s.Session, From: lo, To: end})
	}
	return out
}
