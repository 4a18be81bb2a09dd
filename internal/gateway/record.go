package gateway

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/internal/evidence"
	"github.com/openrath/rath/internal/lru"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// convo is what the gateway knows of a session's conversation as of the
// session's head: the digests of the messages recorded so far (the last
// call's request and its answer), and the calls recorded, to answer a call
// from the record (a retry, a fork's calls before its fork point, a replay).
type convo struct {
	digests [][32]byte
	head    uint64
	// calls are the recorded answers by their request's key; last is the
	// last one recorded.
	calls map[[32]byte]*recorded
	last  *recorded
	// view is the session as the gateway left it at head; nil: unknown
	// (read the session's state).
	view *view
}

// recorded is a call's answer as the session holds it.
type recorded struct {
	request   [][32]byte // the digests of the request's messages
	stream    bool
	kind      string // the wire format (the provider kind)
	ref       string // the provider's answer (body or event stream), a blob
	reqRef    string // the request's body, a blob
	inherited bool   // recorded in an ancestor of the session: a fork's
	seq       uint64
}

// key identifies a request by its messages.
func key(digests [][32]byte) [32]byte {
	h := sha256.New()
	for _, d := range digests {
		h.Write(d[:])
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// size is what the convo holds, approximately, in bytes.
func (cv *convo) size() int64 {
	n := int64(64 + 32*len(cv.digests))
	for _, c := range cv.calls {
		n += 160 + 32*int64(len(c.request))
	}
	return n
}

// add records a call's answer in the convo.
func (cv *convo) add(c *recorded) {
	if cv.calls == nil {
		cv.calls = map[[32]byte]*recorded{}
	}
	cv.calls[key(c.request)] = c
	cv.last = c
}

// convos keeps the conversations of the sessions the gateway served last,
// and serialises the calls of each session in this process.
type convos struct {
	mu    sync.Mutex
	cache *lru.Sized[string, *convo]
	locks map[string]*sessionLock
}

type sessionLock struct {
	mu   sync.Mutex
	refs int
}

// newConvos keeps conversations of about maxBytes of digests in all.
func newConvos(maxBytes int64) *convos {
	return &convos{cache: lru.New[string, *convo](maxBytes), locks: map[string]*sessionLock{}}
}

// lock serialises the calls of one session; unlock with the function it
// returns.
func (c *convos) lock(id string) func() {
	c.mu.Lock()
	l := c.locks[id]
	if l == nil {
		l = &sessionLock{}
		c.locks[id] = l
	}
	l.refs++
	c.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		c.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(c.locks, id)
		}
		c.mu.Unlock()
	}
}

func (c *convos) get(id string) *convo {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.cache.Lookup(id); ok {
		return s.Value
	}
	return nil
}

// put keeps cv as the session's conversation; nil forgets it.
func (c *convos) put(id string, cv *convo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cv == nil {
		if s, ok := c.cache.Lookup(id); ok {
			c.cache.Drop(s)
		}
		return
	}
	s := c.cache.Get(id, func(string) *convo { return cv })
	s.Value = cv
	c.cache.Account(s, int64(len(id))+cv.size())
}

// chat serves a call in wire format wi (POST .../chat/completions,
// .../messages).
func (g *Gateway) chat(w http.ResponseWriter, r *http.Request, wi wire) {
	k, req, ok := g.begin(w, r, wi)
	if !ok {
		return
	}
	defer g.convos.lock(k.key())()
	ctx := r.Context()
	asked := digests(req.Messages)
	var cv *convo
	var seq uint64
	for fresh := false; ; fresh = true {
		// The session as this gateway left it, when it did (one call after
		// another needs no read), else as the ledger has it now.
		if cv = g.convos.get(k.key()); cv == nil || cv.view == nil || fresh {
			st, err := g.session(ctx, k)
			if err != nil {
				g.refuse(w, k, err)
				return
			}
			if cv, err = g.convo(ctx, k, st); err != nil {
				g.refuse(w, k, err)
				return
			}
			cv.view = viewOf(st)
		}
		if c := cv.calls[key(asked)]; c != nil && c.kind == wi.kind() && c.stream == req.Stream && (c == cv.last || c.inherited) {
			// Sent again (its response was lost), or a fork's call before
			// its fork point: the record answers, as it answered then.
			g.again(ctx, w, k, c, req)
			return
		}
		var err error
		seq, err = g.recordInputs(ctx, k, cv, req.Messages[common(asked, cv.digests):])
		if err == nil {
			break
		}
		g.convos.put(k.key(), nil)
		if fresh || api.CodeOf(err) != api.CodeStale {
			g.refuse(w, k, err)
			return
		}
		// Someone else appended since this gateway did: read it, once.
	}
	cv.digests, cv.head = asked, seq
	defer func() { g.convos.put(k.key(), cv) }()
	// The provider's call is not the caller's to cut short: its answer is
	// recorded whole even if the caller goes away. The request's body is
	// stored while the provider answers.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.Timeout)
	defer cancel()
	reqRef := g.store(pctx, k, k.body)
	k.tenant, k.answer = cv.view.tenant, fmt.Sprintf("gw-%d", seq)
	ans, raw, at, status, err := g.ask(pctx, w, r, k, req)
	if err != nil {
		var ferr error
		if cv.head, ferr = g.failed(pctx, k, seq, req.Model, status, reqRef, err); ferr != nil {
			cv = nil
		}
		if !at.streaming {
			g.providerFailed(w, k, status, err)
		}
		return
	}
	c, err := g.recordAnswer(pctx, k, cv, seq, req.Model, ans, raw, reqRef, at.latency)
	if err != nil {
		cv = nil
		g.log.Error("gateway: the answer is not recorded", "session", k.session, "user", k.who.String(), "err", err)
		if !at.streaming {
			g.refuse(w, k, err)
		}
		return
	}
	c.request, c.stream, c.kind = asked, req.Stream, wi.kind()
	cv.add(c)
	cv.digests, cv.head = append(asked, digest(ans.Message)), c.seq
	if !at.streaming {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(raw)
	}
}

// view is what a call needs of its session's state, kept up to date by the
// gateway's own appends: the session's tenant, and its open calls (ID to
// tool), which a tool result completes.
type view struct {
	tenant string
	open   map[string]string
}

func viewOf(st *session.State) *view {
	v := &view{tenant: events.TenantOrDefault(st.Tenant), open: map[string]string{}}
	for id, t := range st.Tools {
		if t.Status != session.ToolCompleted && t.Status != session.ToolFailed {
			v.open[id] = t.Tool
		}
	}
	return v
}

// blob is a body being stored: its reference once stored.
type blob chan struct {
	ref string
	err error
}

// store stores b in the background.
func (g *Gateway) store(ctx context.Context, k *call, b []byte) blob {
	c := make(blob, 1)
	go func() {
		ref, err := k.c.PutBlob(ctx, b)
		c <- struct {
			ref string
			err error
		}{ref, err}
	}()
	return c
}

// wait returns the stored body's reference.
func (b blob) wait() (string, error) {
	r := <-b
	b <- r // for another waiter
	return r.ref, r.err
}

// digests are the digests of a conversation's messages.
func digests(msgs []message) [][32]byte {
	d := make([][32]byte, len(msgs))
	for i, m := range msgs {
		d[i] = digest(m)
	}
	return d
}

// begin authenticates a call, reads its body and parses it in wire format
// wi; on failure it has answered the caller.
func (g *Gateway) begin(w http.ResponseWriter, r *http.Request, wi wire) (*call, *request, bool) {
	k, ok := g.open(w, r, wi)
	if !ok {
		return nil, nil, false
	}
	body, ok := readBody(w, r, wi.fail)
	if !ok {
		return nil, nil, false
	}
	req, err := wi.parseRequest(body)
	if err != nil {
		wi.fail(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return nil, nil, false
	}
	k.body = body
	return k, req, true
}

// session reads the call's session, starting it on first use as the
// caller. A session of another tenant does not exist for the caller (the
// ledger answers so), and starting one of its ID is refused as taken.
func (g *Gateway) session(ctx context.Context, k *call) (*session.State, error) {
	st, err := k.c.State(ctx, k.session)
	if errors.Is(err, api.ErrNotFound) {
		_, err = k.c.Start(ctx, k.session, events.SessionStarted{Labels: map[string]string{LabelGateway: k.wire.kind()}},
			events.WithSource(Source))
		if err != nil && !errors.Is(err, api.ErrExists) {
			return nil, fmt.Errorf("start session %s: %w", k.session, err)
		}
		st, err = k.c.State(ctx, k.session)
	}
	if err != nil {
		return nil, fmt.Errorf("read session %s: %w", k.session, err)
	}
	if st.Status.Ended() {
		return nil, api.Errorf(api.CodeClosed, "session %s is %s: it takes no more calls", k.session, st.Status)
	}
	return st, nil
}

// convo returns what the gateway knows of the session's conversation at
// its head st.Seq, for the caller to change (calls of a session are
// serialised). Events appended since it last looked (by another gateway,
// or anyone; all of them, the first time) are read: every model call the
// gateway recorded is indexed by its request, read back from its blob, and
// the conversation so far is the last call's request and answer.
func (g *Gateway) convo(ctx context.Context, k *call, st *session.State) (*convo, error) {
	cv := g.convos.get(k.key())
	if cv != nil && cv.head == st.Seq {
		return cv, nil
	}
	if cv == nil || cv.head > st.Seq {
		cv = &convo{}
	}
	var last events.Stored
	var lastKind, lastReq, lastResp string
	err := k.c.Events(ctx, k.session, client.Range{From: cv.head + 1, To: st.Seq}, func(ev events.Stored) error {
		if ev.Source != Source || ev.Type != events.TypeModelCalled && ev.Type != events.TypeModelCallFailed {
			return nil
		}
		d, err := ev.Decode()
		if err != nil {
			return fmt.Errorf("session %s event %d: %w", k.session, ev.Seq, err)
		}
		switch d := d.(type) {
		case *events.ModelCalled:
			if d.RequestRef == "" || d.ResponseRef == "" {
				return nil
			}
			req, err := g.recordedRequest(ctx, k, d.Provider, d.RequestRef)
			if err != nil {
				return err
			}
			cv.add(&recorded{request: digests(req.Messages), stream: req.Stream, kind: d.Provider, ref: d.ResponseRef, reqRef: d.RequestRef,
				inherited: ev.Session != k.session, seq: ev.Seq})
			last, lastKind, lastReq, lastResp = ev, d.Provider, d.RequestRef, d.ResponseRef
		case *events.ModelCallFailed:
			if d.RequestRef != "" {
				last, lastKind, lastReq, lastResp = ev, d.Provider, d.RequestRef, ""
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read session %s: %w", k.session, err)
	}
	if last.ID != "" {
		if cv.digests, err = g.conversation(ctx, k, lastKind, lastReq, lastResp); err != nil {
			return nil, err
		}
	}
	cv.head = st.Seq
	return cv, nil
}

// recordedRequest reads a recorded request back from its blob, in the wire
// format of provider kind.
func (g *Gateway) recordedRequest(ctx context.Context, k *call, kind, ref string) (*request, error) {
	wi, ok := wires[kind]
	if !ok {
		return nil, fmt.Errorf("session %s recorded a call of provider %q, which the gateway does not read", k.session, kind)
	}
	body, err := k.c.GetBlob(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("read the recorded request %s of session %s: %w", ref, k.session, err)
	}
	req, err := wi.parseRequest(body)
	if err != nil {
		return nil, fmt.Errorf("the recorded request %s of session %s: %w", ref, k.session, err)
	}
	return req, nil
}

// conversation is the digests of a recorded call's request and its answer
// (a failed call has none: respRef "").
func (g *Gateway) conversation(ctx context.Context, k *call, kind, reqRef, respRef string) ([][32]byte, error) {
	req, err := g.recordedRequest(ctx, k, kind, reqRef)
	if err != nil {
		return nil, err
	}
	asked := digests(req.Messages)
	if respRef == "" {
		return asked, nil
	}
	body, err := k.c.GetBlob(ctx, respRef)
	if err != nil {
		return nil, fmt.Errorf("read the recorded answer %s of session %s: %w", respRef, k.session, err)
	}
	wi := wires[kind]
	var ans *answer
	if req.Stream {
		ans, _, err = wi.copyStream(bytes.NewReader(body), io.Discard, nil, false, nil)
	} else {
		ans, err = wi.parseResponse(body)
	}
	if err != nil {
		return nil, fmt.Errorf("the recorded answer %s of session %s: %w", respRef, k.session, err)
	}
	return append(asked, digest(ans.Message)), nil
}

// again answers a call from the record.
func (g *Gateway) again(ctx context.Context, w http.ResponseWriter, k *call, last *recorded, req *request) {
	body, err := k.c.GetBlob(ctx, last.ref)
	if err != nil {
		g.refuse(w, k, fmt.Errorf("read the recorded answer %s: %w", last.ref, err))
		return
	}
	if last.stream {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _, _ = k.wire.copyStream(bytes.NewReader(body), w, nil, !req.WantsUsage, nil)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// recordInputs records the messages a call adds to the conversation, in one
// atomic append at the session's head as cv knows it, and returns the new
// head; cv's open calls lose those the messages complete.
func (g *Gateway) recordInputs(ctx context.Context, k *call, cv *convo, msgs []message) (uint64, error) {
	var evs []event.Event
	add := func(data any) error {
		ev, err := events.New(k.session, data, events.WithSource(Source))
		if err == nil {
			evs = append(evs, ev)
		}
		return err
	}
	var done []string
	for _, m := range msgs {
		t := m.Text
		switch m.Role {
		case "tool":
			tool, open := cv.view.open[m.ToolCallID]
			if !open {
				// No open call of that ID: kept as what the caller said.
				if err := add(&events.ChunkAppended{Role: events.RoleTool, Content: t, ToolCallID: m.ToolCallID}); err != nil {
					return 0, err
				}
				continue
			}
			result, ref, err := evidence.Keep(ctx, k.c, t)
			if err != nil {
				return 0, fmt.Errorf("the result of call %s: %w", m.ToolCallID, err)
			}
			if err := add(&events.ToolCompleted{CallID: m.ToolCallID, Tool: tool, Result: result, ResultRef: ref}); err != nil {
				return 0, err
			}
			done = append(done, m.ToolCallID)
		case "assistant":
			if err := g.addAnswer(add, k, m); err != nil {
				return 0, err
			}
		default:
			if err := add(&events.ChunkAppended{Role: m.Role, Content: t}); err != nil {
				return 0, err
			}
		}
	}
	head, err := g.append(ctx, k, cv.head, evs)
	if err != nil {
		return 0, err
	}
	for _, id := range done {
		delete(cv.view.open, id)
	}
	for _, m := range msgs {
		if m.Role == "assistant" {
			for _, c := range m.Calls {
				cv.view.open[c.ID] = c.Name
			}
		}
	}
	return head, nil
}

// addAnswer adds an assistant message: its text as a chunk, its tool calls
// as calls the caller runs.
func (g *Gateway) addAnswer(add func(any) error, k *call, m message) error {
	if m.Text != "" {
		if err := add(&events.ChunkAppended{Role: events.RoleAssistant, Agent: k.agent, Content: m.Text}); err != nil {
			return err
		}
	}
	for _, c := range m.Calls {
		if err := add(&events.ToolRequested{CallID: c.ID, Tool: c.Name, Arguments: c.Arguments, Agent: k.agent,
			Runner: events.RunnerCaller}); err != nil {
			return err
		}
	}
	return nil
}

// append appends evs atomically at head seq and returns the new head.
func (g *Gateway) append(ctx context.Context, k *call, seq uint64, evs []event.Event) (uint64, error) {
	if len(evs) == 0 {
		return seq, nil
	}
	events.WithExpectedSeq(seq)(&evs[0])
	if len(evs) == 1 {
		// One event is all or nothing by itself; an atomic batch costs the
		// server a staging store of its own at R1 (docs/benchmarks.md).
		ack, err := k.c.Append(ctx, evs[0])
		return ack.Seq, err
	}
	acks, err := k.c.AppendAtomic(ctx, evs)
	if err != nil {
		return 0, err
	}
	return acks[len(acks)-1].Seq, nil
}

// attempt is how a provider call went.
type attempt struct {
	latency   time.Duration
	streaming bool // the caller's response has begun: errors go in the log only
}

// recordAnswer records the answer at head seq: its text, its tool calls and
// the model call with both bodies, and returns what it recorded. Someone
// else's event since seq moves the answer after it (its events do not
// depend on the session's state).
func (g *Gateway) recordAnswer(ctx context.Context, k *call, cv *convo, seq uint64, model string, ans *answer, raw []byte, request blob, latency time.Duration) (*recorded, error) {
	// A blob's reference is its content's hash: the events name both
	// bodies while they are stored, and the call is answered once all are.
	response := g.store(ctx, k, raw)
	reqRef, respRef := eventstore.BlobRef(k.body), eventstore.BlobRef(raw)
	stored := func() error {
		for _, b := range []struct {
			blob blob
			ref  string
			what string
		}{{request, reqRef, "the request body"}, {response, respRef, "the provider's answer"}} {
			ref, err := b.blob.wait()
			if err == nil && ref != b.ref {
				err = fmt.Errorf("stored as %s, not %s", ref, b.ref)
			}
			if err != nil {
				return fmt.Errorf("store %s: %w", b.what, err)
			}
		}
		return nil
	}
	var evs []event.Event
	add := func(data any) error {
		ev, err := events.New(k.session, data, events.WithSource(Source))
		if err == nil {
			evs = append(evs, ev)
		}
		return err
	}
	if err := g.addAnswer(add, k, ans.Message); err != nil {
		return nil, err
	}
	if err := add(&events.ModelCalled{Agent: k.agent, Provider: k.wire.kind(), Model: cmp.Or(ans.Model, model),
		TokensIn: ans.TokensIn, TokensOut: ans.TokensOut, LatencyMS: latency.Milliseconds(), Attempt: 1,
		StopReason: ans.FinishReason, RequestRef: reqRef, ResponseRef: respRef}); err != nil {
		return nil, err
	}
	head, err := g.append(ctx, k, seq, evs)
	if api.CodeOf(err) == api.CodeStale {
		var st *session.State
		if st, err = k.c.State(ctx, k.session); err == nil {
			for i := range evs {
				evs[i].SetExtension(events.ExtExpectedSeq, nil)
			}
			head, err = g.append(ctx, k, st.Seq, evs)
		}
	}
	if serr := stored(); serr != nil {
		// The answer's events name a body that is not stored: the record
		// of this call is incomplete, and the caller is told so.
		return nil, errors.Join(serr, err)
	}
	if err != nil {
		return nil, err
	}
	for _, c := range ans.Message.Calls {
		cv.view.open[c.ID] = c.Name
	}
	return &recorded{ref: respRef, reqRef: reqRef, seq: head}, nil
}

// failed records a provider call that failed, with the request it sent
// (the conversation so far is then the request's messages, which a call
// sent again does not record twice), and returns the new head.
func (g *Gateway) failed(ctx context.Context, k *call, seq uint64, model string, status int, request blob, why error) (uint64, error) {
	ref, err := request.wait()
	if err != nil {
		return 0, fmt.Errorf("store the request body: %w", err)
	}
	ev, err := events.New(k.session, &events.ModelCallFailed{Agent: k.agent, Provider: k.wire.kind(), Model: model,
		Attempt: 1, Status: status, Error: redact(k.up.Key, why.Error()), RequestRef: ref}, events.WithSource(Source))
	if err != nil {
		return 0, err
	}
	head, err := g.append(ctx, k, seq, []event.Event{ev})
	if err != nil {
		g.log.Error("gateway: a failed provider call is not recorded", "session", k.session, "err", err)
	}
	return head, err
}

// redact removes the operator's key from a text a provider answered.
func redact(key, s string) string {
	if key == "" {
		return s
	}
	return strings.ReplaceAll(s, key, "[key]")
}

// refuse answers a call Rath refused or could not record.
func (g *Gateway) refuse(w http.ResponseWriter, k *call, err error) {
	status, code := http.StatusBadGateway, "rath_error"
	switch api.CodeOf(err) {
	case api.CodeNotFound, api.CodeExists:
		status, code = http.StatusConflict, "session_taken"
		err = fmt.Errorf("session %s belongs to someone else: choose another session ID", k.session)
	case api.CodeClosed, api.CodeTransition:
		status, code = http.StatusConflict, "session_closed"
	case api.CodeStale, api.CodeConflict:
		status, code = http.StatusConflict, "session_busy"
		err = fmt.Errorf("session %s changed while this call was recorded (another call of it ran at once): send it again", k.session)
		g.convos.put(k.key(), nil)
	case api.CodeQuotaExceeded:
		status, code = http.StatusTooManyRequests, "rate_limit_exceeded"
	case api.CodeTooLarge:
		status, code = http.StatusRequestEntityTooLarge, "too_large"
	case api.CodeUnavailable:
		status, code = http.StatusServiceUnavailable, "rath_unavailable"
	}
	g.log.Warn("gateway call refused", "session", k.session, "user", k.who.String(), "token", k.token, "err", err)
	k.wire.fail(w, status, code, err.Error())
}

func (g *Gateway) providerFailed(w http.ResponseWriter, k *call, status int, err error) {
	if status < 400 || status >= 600 {
		status = http.StatusBadGateway
	}
	k.wire.fail(w, status, "upstream_error", redact(k.up.Key, err.Error()))
}

func common(a, b [][32]byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
