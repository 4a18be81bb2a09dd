package ledger

import (
	"context"
	"errors"
	"fmt"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"math"
	"mime"
	"slices"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/schema"
	"github.com/openrath/rath/pkg/session"
)

// Append validates a proposal and, if it passes, appends it to its session's
// log with the next sequence and chain hash. A rejected proposal returns an
// *api.Error; the caller records it. Re-proposing a stored event ID returns the
// original ack.
func (l *Ledger) Append(ctx context.Context, ev event.Event) (api.Ack, error) {
	if err := refuseOperation(ev.Type()); err != nil {
		return api.Ack{}, err
	}
	assigned := ev.Subject() == ""
	if err := l.check(&ev); err != nil {
		return api.Ack{}, err
	}
	a, err := l.append(ctx, ev, nil)
	if err == nil && a.Duplicate && a.Session != ev.Subject() && !assigned {
		// A retried start without a session ID is the one case where the
		// original's session differs and the ack is right.
		return api.Ack{}, duplicateID(a)
	}
	return a, err
}

// duplicateID refuses an event whose ID another session stored: JetStream
// deduplicates message IDs stream-wide.
func duplicateID(original api.Ack) error {
	return api.Errorf(api.CodeDuplicateID, "event ID %s is stored already, in session %s at %d: choose a new ID", original.ID, original.Session, original.Seq)
}

// refuseOperation refuses the event kinds only the ledger's own operations make.
func refuseOperation(typ string) error {
	switch typ {
	case events.TypeSessionForked, events.TypeSessionMerged, events.TypeSessionArchived, events.TypeSessionPurged:
		return api.Errorf(api.CodeUseOperation, "%s events are made by the ledger's %s operation, not proposed", typ, opOf(typ))
	}
	return nil
}

func opOf(typ string) string {
	if typ == events.TypeSessionForked {
		return "fork (rath.ledger.<tenant>.<user>." + events.OpFork + ")"
	}
	if typ == events.TypeSessionArchived || typ == events.TypeSessionPurged {
		return "archive (rath.ledger.<tenant>.<user>." + events.OpArchive + ")"
	}
	return "merge (rath.ledger.<tenant>.<user>." + events.OpMerge + ")"
}

// check runs the stateless validation and normalises the envelope: a session
// start without a session ID gets one, proposer-set chain attributes go.
func (l *Ledger) check(ev *event.Event) error {
	if err := ev.Validate(); err != nil {
		return api.Errorf(api.CodeMalformed, "not a valid CloudEvent: %v", err)
	}
	if sv := ev.SpecVersion(); sv != event.CloudEventsVersionV1 {
		return api.Errorf(api.CodeMalformed, "specversion %q is not supported: Rath accepts CloudEvents %s only", sv, event.CloudEventsVersionV1)
	}
	if _, ok := events.Lookup(ev.Type()); !ok {
		return api.Errorf(api.CodeUnknownType, "unknown event type %q (see docs/protocol.md for the catalog)", ev.Type())
	}
	if ct := ev.DataContentType(); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || (mt != event.ApplicationJSON && mt != "text/json" && !strings.HasSuffix(mt, "+json")) {
			return api.Errorf(api.CodeMalformed, "datacontenttype must be application/json, got %q", ct)
		}
	}
	if ds := ev.DataSchema(); ds != "" {
		if k, _ := events.Lookup(ev.Type()); ds != k.DataSchema() {
			return api.Errorf(api.CodeSchema, "dataschema %q is not the schema of %s (%s)", ds, ev.Type(), k.DataSchema())
		}
	}
	if err := schema.Validate(ev.Type(), ev.Data()); err != nil {
		return api.Errorf(api.CodeSchema, "%v", err)
	}
	// Data that arrived as data_base64 is JSON (the schema says so): store
	// it as "data", which is what every reader folds.
	ev.DataBase64 = false
	if ev.Subject() == "" && ev.Type() == events.TypeSessionStarted {
		ev.SetSubject(NewSessionID())
	}
	if ev.Subject() == "" {
		return api.Errorf(api.CodeInvalidSession, "the CloudEvents subject must name the session (only a session start may leave it empty)")
	}
	if err := events.ValidateSessionID(ev.Subject()); err != nil {
		return api.Errorf(api.CodeInvalidSession, "%v", err)
	}
	if _, _, err := events.ExpectedSeq(*ev); err != nil {
		return api.Errorf(api.CodeMalformed, "%v", err)
	}
	if ev.Time().IsZero() {
		ev.SetTime(l.now())
	}
	ev.SetDataContentType(event.ApplicationJSON)
	return nil
}

// append appends a checked event. before, if set, runs against the session's
// current state after the lifecycle checks (merge uses it to compute what it
// takes in).
func (l *Ledger) append(ctx context.Context, ev event.Event, before func(context.Context, *session.State, *event.Event) error) (api.Ack, error) {
	x := takeExpectation(&ev)
	acks, err := l.commit(ctx, []event.Event{ev}, x, commitOpts{before: before})
	if err != nil {
		return api.Ack{}, err
	}
	return acks[0], nil
}

// expectation is the head sequence a proposer expects its session to have.
type expectation struct {
	seq uint64
	set bool
}

// takeExpectation reads the proposer's expected head and strips every chain
// attribute: they are the ledger's to set, and the expectation is spent.
func takeExpectation(ev *event.Event) expectation {
	seq, set, _ := events.ExpectedSeq(*ev)
	for _, name := range []string{events.ExtExpectedSeq, events.ExtSeq, events.ExtPrev, events.ExtHash, events.ExtSig} {
		ev.SetExtension(name, nil)
	}
	return expectation{seq: seq, set: set}
}

// sealRefusal names why an event could not be sealed: a session at the
// largest sequence is out of range; anything else is input the canonical
// form cannot hold (a number beyond float64, text that is not Unicode),
// which the parser refuses first wherever it can.
func sealRefusal(seq uint64, err error) error {
	if seq > math.MaxInt32 {
		return api.Errorf(api.CodeOutOfRange, "%v", err)
	}
	return api.Errorf(api.CodeMalformed, "%v", err)
}

// afterAppend stores a snapshot if the events after sequence from crossed a
// multiple of SnapshotEvery, and keeps the session index current when one
// of them changed the lifecycle. Both are derived data: a failure is logged
// and costs only speed (a longer fold) or freshness of `rath ls`.
func (l *Ledger) afterAppend(ctx context.Context, e *entry, from uint64, lifecycle bool) {
	st := e.state
	if every := l.cfg.SnapshotEvery; st.Seq/every > from/every {
		// A state too large to store is not marshalled again: its session
		// gets markers (positions without state) from then on, which still
		// bound reading one event; folding it starts further back.
		snap := eventstore.Snapshot{State: st, StreamSeq: e.streamSeq}
		if e.bigState {
			snap = eventstore.Snapshot{Seq: st.Seq, Hash: st.Hash, StreamSeq: e.streamSeq}
		}
		err := l.store.PutSnapshot(ctx, e.id, snap)
		if errors.Is(err, eventstore.ErrTooLarge) && !e.bigState {
			e.bigState = true
			l.log.Info("session state too large for snapshots; storing markers", "session", e.id, "seq", st.Seq, "err", err)
			err = l.store.PutSnapshot(ctx, e.id, eventstore.Snapshot{Seq: st.Seq, Hash: st.Hash, StreamSeq: e.streamSeq})
		}
		if err != nil {
			l.log.Warn("snapshot skipped", "session", st.ID, "seq", st.Seq, "err", err)
		}
	}
	if lifecycle {
		rec := eventstore.Record{
			ID: st.ID, Tenant: tenantOf(st), Status: string(st.Status), Outcome: st.Outcome, Parent: st.Lineage.Parent, ForkSeq: st.Lineage.ForkSeq,
			Workflow: st.Workflow, Task: indexTaskOf(st.Task), Labels: st.Labels, Created: st.Created, Updated: st.Updated, Seq: st.Seq,
		}
		if err := l.store.PutRecord(ctx, rec); err != nil {
			l.log.Warn("session index not updated", "session", st.ID, "seq", st.Seq, "err", err)
		}
	}
}

// transition checks the session state machine. It looks at event data only
// to decide an approval (decides), for which it needs who proposes and when
// (by); the schema has been checked already.
func transition(st *session.State, id, typ string, data []byte, expected uint64, hasExpected bool, by decider) error {
	if st == nil {
		if typ != events.TypeSessionStarted && typ != events.TypeSessionForked {
			return notFound(id)
		}
		if hasExpected && expected != 0 {
			return api.Errorf(api.CodeStale, "stale sequence: expected head %d, session %s does not exist yet (head 0)", expected, id)
		}
		return nil
	}
	if hasExpected && expected != st.Seq {
		return api.Errorf(api.CodeStale, "stale sequence: expected head %d, session %s is at %d", expected, id, st.Seq)
	}
	switch {
	case typ == events.TypeSessionStarted || typ == events.TypeSessionForked:
		return api.Errorf(api.CodeExists, "session %s already exists (head %d)", id, st.Seq)
	case st.Status.Ended():
		return endedTransition(st, id, typ)
	case typ == events.TypeSessionArchived || typ == events.TypeSessionPurged:
		return api.Errorf(api.CodeTransition, "session %s is %s: only a closed session can be archived; close it first", id, st.Status)
	case typ == events.TypeSessionPaused && st.Status == session.StatusPaused:
		return api.Errorf(api.CodeTransition, "session %s is already paused", id)
	case typ == events.TypeSessionResumed && st.Status != session.StatusPaused:
		return api.Errorf(api.CodeTransition, "session %s is not paused", id)
	case typ == events.TypeApprovalGranted || typ == events.TypeApprovalRejected:
		return decides(st, id, typ, data, by)
	case typ == events.TypeApprovalExpired:
		return expires(st, id, data, by)
	case typ == events.TypeApprovalRequested:
		return requests(st, id, data)
	case typ == events.TypeToolCleared && !by.principal.IsService():
		return api.Errorf(api.CodeTransition, "only the tool runner decides a call's gate, not %s", by.principal)
	}
	return nil
}

// requests admits an approval request whose ID the session has not
// requested yet: asking again would replace who is asked, and what the
// gated call waits for, under the same ID (ADR 0025, amendment). A retried
// proposal of a stored request is answered with its ack before this check.
func requests(st *session.State, id string, data []byte) error {
	d, err := events.DecodeData(events.TypeApprovalRequested, data)
	if err != nil {
		return api.Errorf(api.CodeMalformed, "%v", err)
	}
	r := d.(*events.ApprovalRequested)
	if a, ok := st.Approvals[r.ApprovalID]; ok {
		return api.Errorf(api.CodeTransition, "approval %s of session %s was requested already, at %d by %s: choose another ID", r.ApprovalID, id, a.Seq, orUnknown(a.RequestedBy))
	}
	return nil
}

// decider is who proposes an event and when, as the ledger judges an
// approval's decision or expiry.
type decider struct {
	principal events.Principal
	now       time.Time
	// roles returns the approver roles a principal holds; nil: every
	// principal holds every role (a ledger configured without approvers).
	roles func(events.Principal) ([]string, error)
}

// decider is the proposer of ctx, now.
func (l *Ledger) decider(ctx context.Context) decider {
	return decider{principal: principalOf(ctx), now: l.now(), roles: l.cfg.Approvers}
}

// holds reports whether the decider holds role ("*" holds every role), or
// the refusal that says why not.
func (d decider) holds(role string) error {
	if role == "" || d.roles == nil {
		return nil
	}
	roles, err := d.roles(d.principal)
	if err != nil {
		return api.Errorf(api.CodeUnavailable, "approver roles: %v", err)
	}
	if slices.Contains(roles, role) || slices.Contains(roles, "*") {
		return nil
	}
	held := "none"
	if len(roles) > 0 {
		held = strings.Join(roles, ", ")
	}
	return api.Errorf(api.CodeNotApprover, "%s does not hold the approver role %q (its roles: %s)", d.principal, role, held)
}

// decides admits a grant or rejection of an approval the session requested
// and nobody has decided yet, before its deadline, by a principal holding
// the role asked: a decision about an approval that does not exist, a
// second decision, a late one or one by the wrong person must not be
// recorded as if it counted. A retried proposal of a decision that was
// stored is answered with its ack before this check (by event ID).
func decides(st *session.State, id, typ string, data []byte, by decider) error {
	d, err := events.DecodeData(typ, data)
	if err != nil {
		return api.Errorf(api.CodeMalformed, "%v", err)
	}
	var approval string
	switch d := d.(type) {
	case *events.ApprovalGranted:
		approval = d.ApprovalID
	case *events.ApprovalRejected:
		approval = d.ApprovalID
	}
	a, ok := st.Approvals[approval]
	switch {
	case !ok:
		return api.Errorf(api.CodeApprovalUnknown, "session %s has requested no approval %q (rath approvals %s lists the pending ones)", id, approval, id)
	case a.Outcome == session.ApprovalExpired:
		return api.Errorf(api.CodeApprovalExpired, "approval %s of session %s expired at %s, undecided (recorded at %d)", approval, id, a.Deadline, a.DecidedSeq)
	case a.Outcome != "":
		return api.Errorf(api.CodeApprovalSettled, "approval %s of session %s was %s already, at %d by %s", approval, id, a.Outcome, a.DecidedSeq, orUnknown(a.Actor))
	case past(a.Deadline, by.now):
		return api.Errorf(api.CodeApprovalExpired, "approval %s of session %s expired at %s: a decision no longer counts", approval, id, a.Deadline)
	}
	return by.holds(a.Approver)
}

// expires admits the expiry of a pending approval: proposed by one of
// Rath's services (its durable timers), naming the approval's current
// deadline, once that deadline has passed.
func expires(st *session.State, id string, data []byte, by decider) error {
	d, err := events.DecodeData(events.TypeApprovalExpired, data)
	if err != nil {
		return api.Errorf(api.CodeMalformed, "%v", err)
	}
	x := d.(*events.ApprovalExpired)
	a, ok := st.Approvals[x.ApprovalID]
	switch {
	case !by.principal.IsService():
		return api.Errorf(api.CodeTransition, "only Rath's timers record an approval's expiry, not %s: reject it instead", by.principal)
	case !ok:
		return api.Errorf(api.CodeApprovalUnknown, "session %s has requested no approval %q", id, x.ApprovalID)
	case a.Outcome != "":
		return api.Errorf(api.CodeApprovalSettled, "approval %s of session %s was %s already, at %d", x.ApprovalID, id, a.Outcome, a.DecidedSeq)
	case a.Deadline == "" || a.Deadline != x.Deadline:
		return api.Errorf(api.CodeTransition, "approval %s of session %s has the deadline %q, not %s", x.ApprovalID, id, a.Deadline, x.Deadline)
	case !past(a.Deadline, by.now):
		return api.Errorf(api.CodeTransition, "approval %s of session %s expires at %s, not before", x.ApprovalID, id, a.Deadline)
	}
	return nil
}

// past reports whether deadline (RFC 3339; "" for none) is reached at now.
// A deadline that does not parse never passes: the fold and the timers
// read the same text.
func past(deadline string, now time.Time) bool {
	if deadline == "" {
		return false
	}
	t, err := events.ParseDeadline(deadline)
	return err == nil && !now.Before(t)
}

func orUnknown(s string) string {
	if s == "" {
		return "an unknown actor"
	}
	return s
}

// findStored looks for an event ID in a session's own log. It runs only on
// the rejection path, so a retried proposal whose first attempt was stored
// (and then changed the state it was checked against) still gets its ack.
func (l *Ledger) findStored(ctx context.Context, id, eventID string) (api.Ack, bool, error) {
	if _, err := l.lineageOf(ctx, id); err != nil {
		return api.Ack{}, false, err
	}
	var a api.Ack
	found := false
	err := l.ownEvents(ctx, id, 0, 0, func(ev events.Stored, m eventstore.Msg) error {
		if ev.ID == eventID {
			a, found = api.Ack{ID: ev.ID, Session: id, Seq: ev.Seq, Hash: ev.Hash, Sig: ev.Sig, StreamSeq: m.StreamSeq, Duplicate: true}, true
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return api.Ack{}, false, err
	}
	if found {
		if a.Sig, err = l.fullSig(ctx, a.Sig); err != nil {
			return api.Ack{}, false, unavailable(err)
		}
	}
	return a, found, nil
}

// ackAt builds the ack of an already stored event.
func (l *Ledger) ackAt(ctx context.Context, streamSeq uint64) (api.Ack, error) {
	m, err := l.store.Get(ctx, streamSeq)
	if err != nil {
		return api.Ack{}, unavailable(err)
	}
	ev, err := events.ParseStored(m.Body)
	if err != nil {
		return api.Ack{}, fmt.Errorf("read original of duplicate: %w", err)
	}
	sig, err := l.fullSig(ctx, ev.Sig)
	if err != nil {
		return api.Ack{}, unavailable(err)
	}
	return api.Ack{ID: ev.ID, Session: ev.Session, Seq: ev.Seq, Hash: ev.Hash, Sig: sig, StreamSeq: streamSeq, Duplicate: true}, nil
}

// unavailable wraps a store failure; ledger errors pass through.
func unavailable(err error) error {
	var le *api.Error
	if errors.As(err, &le) {
		return err
	}
	return &api.Error{Code: api.CodeUnavailable, Message: err.Error()}
}

// NewSessionID returns a fresh session ID (a UUIDv7, valid as a subject token).
func NewSessionID() string { return events.NewID() }

// indexTask is how much of a session's task its index record keeps.
const indexTask = 200

// indexTaskOf is the part of a task an index record keeps: its first
// indexTask characters as written, line breaks included, so a list can
// show its first line (a markdown task's title), not its lines run
// together.
func indexTaskOf(task string) string {
	r := []rune(strings.TrimSpace(task))
	if len(r) <= indexTask {
		return string(r)
	}
	return string(r[:indexTask-1]) + "…"
}

// storedOf is the stored form of an event the ledger just sealed, without
// parsing the body again.
func storedOf(ev *event.Event, session string, s sealed) events.Stored {
	return events.Stored{
		ID: ev.ID(), Source: ev.Source(), Type: ev.Type(), Session: session, Time: ev.Time(),
		Seq: s.seq, Prev: s.prev, Hash: s.hash, Sig: events.Sig(*ev), Causation: events.Causation(*ev), Correlation: events.Correlation(*ev),
		Actor: events.Actor(*ev), Tenant: events.Tenant(*ev), OnBehalf: events.OnBehalf(*ev),
		Data: ev.Data(), Raw: s.body,
	}
}

// fits refuses an event, sealed and not signed yet, that might not fit the
// size limit once signed: the limit must not depend on which group the
// event's signature lands in, and nothing is signed that will be refused.
func (l *Ledger) fits(unsigned []byte) error {
	if n := len(unsigned) + len(`,"`+events.ExtSig+`":""`) + events.MaxSigLen; n > l.store.MaxEventSize() {
		return api.Errorf(api.CodeTooLarge, "the stored event would be up to %d bytes, above the limit of %d: keep large payloads in the object store and reference them", n, l.store.MaxEventSize())
	}
	return nil
}

// turnStart is when the turn in flight was opened (zero if none): the
// metrics time a turn from it to the event that ends it.
func turnStart(st *session.State) time.Time {
	if st == nil || st.Turn == nil {
		return time.Time{}
	}
	return st.Turn.At
}
