package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/archive"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// Archiving and purging.
//
// Archive writes a closed session's own events, as stored, to a bundle in the
// object store and appends rath.session.archived (bundle reference, head,
// head stream sequence, count). Purge appends rath.session.purged and then
// removes the archived events from the hot stream with a filtered JetStream
// purge below the archived event's stream sequence, so the session's first
// stored event from then on is its rath.session.archived. Both events have IDs
// derived from the session and its archived head: two ledgers (or a retried
// request) doing the same work store each event once, and the JetStream purge
// is idempotent, so retention needs no leader.
//
// Reads never depend on a cache being told about a purge: every scan of a
// session's own events looks at the first hot message it gets and reads what
// was purged from the archive bundle (internal/fold, archive.go).

// Archive archives a closed session now (see the comment at the top of this
// file); with req.Purge it also purges it. Refusals are recorded on the
// rejections stream like refused proposals.
func (l *Ledger) Archive(ctx context.Context, req api.ArchiveRequest) (api.ArchiveReply, error) {
	if err := events.ValidateSessionID(req.Session); err != nil {
		return api.ArchiveReply{}, api.Errorf(api.CodeInvalidSession, "%v", err)
	}
	reason := req.Reason
	if reason == "" {
		reason = "archived on request"
	}
	rep, err := l.archive(ctx, req.Session, reason)
	if err != nil {
		return api.ArchiveReply{}, l.refuseOp(ctx, req.Session, events.TypeSessionArchived, err)
	}
	if req.Purge {
		p, err := l.purge(ctx, req.Session, reason)
		if err != nil {
			return api.ArchiveReply{}, l.refuseOp(ctx, req.Session, events.TypeSessionPurged, err)
		}
		rep.Purged = &p
	}
	return rep, nil
}

// refuseOp records a permanent refusal of an archive or purge on the
// rejections stream; like a proposal's, it is never silent.
func (l *Ledger) refuseOp(ctx context.Context, id, typ string, refusal error) error {
	if !api.Permanent(refusal) {
		return refusal
	}
	le := &api.Error{Code: api.CodeOf(refusal), Message: refusal.Error()}
	errors.As(refusal, &le)
	p := principalOf(ctx)
	r := eventstore.Rejection{Time: l.now(), Session: id, Type: typ, Actor: p.String(), Tenant: p.Tenant,
		Code: string(le.Code), Message: le.Message, Via: "archive", Ledger: l.cfg.Name}
	l.log.Warn("archive refused", "session", id, "type", typ, "code", r.Code, "reason", r.Message)
	if err := l.store.Reject(ctx, r, ""); err != nil {
		return &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf("%s (and recording the rejection failed: %v)", le.Message, err)}
	}
	return refusal
}

// archive builds and stores the bundle of a closed session and appends its
// rath.session.archived. An archived session answers its archive again.
func (l *Ledger) archive(ctx context.Context, id, reason string) (api.ArchiveReply, error) {
	st, err := l.head(ctx, id)
	if err != nil {
		return api.ArchiveReply{}, err
	}
	if st.Status == session.StatusArchived && st.Archive != nil {
		a, err := l.ackOf(ctx, id, st.Archive.Seq)
		return api.ArchiveReply{Session: id, BundleRef: st.Archive.BundleRef, Archived: a}, err
	}
	if err := transition(st, id, events.TypeSessionArchived, nil, 0, false, l.decider(ctx)); err != nil {
		return api.ArchiveReply{}, err
	}
	b, err := l.buildBundle(ctx, id, st.Seq)
	if err != nil {
		return api.ArchiveReply{}, err
	}
	data, err := b.Marshal()
	if err != nil {
		return api.ArchiveReply{}, err
	}
	ref, err := l.store.PutBlob(ctx, data)
	if err != nil {
		return api.ArchiveReply{}, unavailable(err)
	}
	d := &events.SessionArchived{BundleRef: ref, FromSeq: b.FromSeq, HeadSeq: b.HeadSeq, HeadHash: b.HeadHash,
		HeadStreamSeq: b.HeadStreamSeq, Events: b.Events, Bytes: int64(len(data)), Reason: reason}
	ev, err := events.New(id, d, events.WithID(events.DerivedID("rath.session.archived", id, b.HeadHash)), events.WithSource("rath/session-ledger"))
	if err != nil {
		return api.ArchiveReply{}, api.Errorf(api.CodeMalformed, "%v", err)
	}
	ev.SetTime(l.now())
	a, err := l.append(ctx, ev, func(_ context.Context, cur *session.State, _ *event.Event) error {
		if cur.Seq != b.HeadSeq {
			return api.Errorf(api.CodeConflict, "session %s moved from %d to %d while it was archived; retry", id, b.HeadSeq, cur.Seq)
		}
		return nil
	})
	if err != nil {
		return api.ArchiveReply{}, err
	}
	l.log.Info("session archived", "session", id, "bundle", ref, "events", b.Events, "bytes", len(data))
	return api.ArchiveReply{Session: id, BundleRef: ref, Archived: a}, nil
}

// buildBundle reads a session's own events up to head, as stored.
func (l *Ledger) buildBundle(ctx context.Context, id string, head uint64) (*archive.Bundle, error) {
	segs, err := l.lineageOf(ctx, id)
	if err != nil {
		return nil, err
	}
	own := segs[len(segs)-1]
	b := &archive.Bundle{Header: archive.Header{Format: archive.Format, Session: id}}
	err = l.scanOwnMsgs(ctx, id, own.StreamSeq, 0, func(m eventstore.Msg) error {
		ev, err := events.ParseStored(m.Body)
		if err != nil {
			return fmt.Errorf("archive %s at stream %d: %w", id, m.StreamSeq, err)
		}
		if ev.Seq > head {
			return errStop
		}
		if len(b.Entries) == 0 {
			b.FromSeq, b.Prev = ev.Seq, ev.Prev
		}
		// Archived with its signature expanded: a bundle verifies without
		// the signature records.
		body, err := l.readOut(ctx, ev, m.Body)
		if err != nil {
			return err
		}
		if !events.IsRecordRef(ev.Sig) {
			body = append([]byte(nil), body...) // the scan reuses m.Body
		}
		b.Entries = append(b.Entries, archive.Entry{StreamSeq: m.StreamSeq, Subject: m.Subject, Event: body})
		b.HeadSeq, b.HeadHash, b.HeadStreamSeq = ev.Seq, ev.Hash, m.StreamSeq
		if ev.Seq == head {
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, unavailable(err)
	}
	b.Events = len(b.Entries)
	if err := b.Verify(); err != nil {
		return nil, api.Errorf(api.CodeUnavailable, "archive of %s does not verify, nothing archived: %v", id, err)
	}
	return b, nil
}

// purge appends rath.session.purged to an archived session and removes the
// archived events from the hot stream. A purge whose event is stored but
// whose JetStream purge did not run (a crash) is completed by the next call.
func (l *Ledger) purge(ctx context.Context, id, reason string) (api.Ack, error) {
	st, err := l.head(ctx, id)
	if err != nil {
		return api.Ack{}, err
	}
	if st.Status != session.StatusArchived || st.Archive == nil {
		return api.Ack{}, transition(st, id, events.TypeSessionPurged, nil, 0, false, l.decider(ctx))
	}
	arch := *st.Archive
	var a api.Ack
	if arch.PurgedSeq != 0 {
		if a, err = l.ackOf(ctx, id, arch.PurgedSeq); err != nil {
			return api.Ack{}, err
		}
	} else {
		if live, err := l.liveForks(ctx, id); err != nil {
			return api.Ack{}, unavailable(err)
		} else if len(live) > 0 {
			return api.Ack{}, api.Errorf(api.CodeTransition, "session %s is not purged: live fork %s still reads its events through its lineage (archive %s keeps them); close the forks first", id, live[0], arch.BundleRef)
		}
		d := &events.SessionPurged{BundleRef: arch.BundleRef, UpToSeq: arch.HeadSeq, Events: arch.Events, Reason: reason}
		ev, err := events.New(id, d, events.WithID(events.DerivedID("rath.session.purged", id, arch.BundleRef)), events.WithSource("rath/session-ledger"))
		if err != nil {
			return api.Ack{}, api.Errorf(api.CodeMalformed, "%v", err)
		}
		ev.SetTime(l.now())
		if a, err = l.append(ctx, ev, nil); err != nil {
			return api.Ack{}, err
		}
	}
	archivedAt, err := l.ackOf(ctx, id, arch.Seq)
	if err != nil {
		return api.Ack{}, err
	}
	if err := l.store.PurgeSession(ctx, id, archivedAt.StreamSeq); err != nil {
		return api.Ack{}, unavailable(err)
	}
	l.log.Info("session purged from the hot stream", "session", id, "bundle", arch.BundleRef, "up_to", arch.HeadSeq)
	// Only now, with both the event and the purge done, may the retention
	// pass skip the session for good.
	if rec, err := l.store.GetRecord(ctx, id); err == nil && !rec.Purged {
		rec.Purged = true
		if err := l.store.PutRecord(ctx, rec); err != nil {
			l.log.Warn("session index not updated", "session", id, "err", err)
		}
	}
	return a, nil
}

// ackOf builds the ack of a session's own stored event at sequence seq.
func (l *Ledger) ackOf(ctx context.Context, id string, seq uint64) (api.Ack, error) {
	var a api.Ack
	err := l.ownEvents(ctx, id, seq, seq, func(ev events.Stored, m eventstore.Msg) error {
		a = api.Ack{ID: ev.ID, Session: id, Seq: ev.Seq, Hash: ev.Hash, StreamSeq: m.StreamSeq, Duplicate: true}
		return nil
	})
	if err != nil {
		return api.Ack{}, unavailable(err)
	}
	if a.ID == "" {
		return api.Ack{}, api.Errorf(api.CodeOutOfRange, "session %s has no own event %d", id, seq)
	}
	return a, nil
}

// liveForks lists the forks of a session, at any depth, that are neither
// closed nor archived: each reads the session's events through its lineage.
func (l *Ledger) liveForks(ctx context.Context, id string) ([]string, error) {
	var live []string
	queue := []string{id}
	seen := map[string]bool{id: true}
	for len(queue) > 0 {
		parent := queue[0]
		queue = queue[1:]
		children, err := l.store.Children(ctx, parent)
		if err != nil {
			return nil, err
		}
		for _, c := range children {
			if seen[c] {
				continue
			}
			seen[c] = true
			queue = append(queue, c)
			st, err := l.head(ctx, c)
			if errors.Is(err, api.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, err
			}
			if !st.Status.Ended() {
				live = append(live, c)
			}
		}
	}
	return live, nil
}

// handleArchive serves rath.ledger.archive.
func (l *Ledger) handleArchive(ctx context.Context, m *nats.Msg) (any, error) {
	var r api.ArchiveRequest
	if err := decodeRequest(m, &r); err != nil {
		return nil, err
	}
	if err := l.readable(ctx, r.Session); err != nil {
		return nil, err
	}
	return l.Archive(ctx, r)
}
