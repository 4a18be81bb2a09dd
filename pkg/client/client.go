// Package client is the Go client of a Rath runtime: start sessions, append
// events, watch them live, read state, fork, merge and verify, all over NATS.
// It needs only a connection; any language can do the same with the subjects
// and bodies in docs/protocol.md.
package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/jsondec"
	"github.com/openrath/rath/internal/tracing"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// Client talks to the session ledger.
type Client struct {
	nc      *nats.Conn
	as      events.Principal
	js      jetstream.JetStream
	timeout time.Duration
	retry   time.Duration
	source  string
}

// Option configures a Client.
type Option func(*Client)

// WithTimeout bounds one request (default 10s).
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithRetryFor bounds how long Append and the operations keep retrying a
// transient failure with the same event ID (default and maximum
// eventstore.RetryHorizon, which the dedupe window exceeds).
func WithRetryFor(d time.Duration) Option {
	return func(c *Client) { c.retry = min(d, eventstore.RetryHorizon) }
}

// As sets the principal the client asks as (default events.DefaultClient,
// the user of rath up's client.nk). It must be the principal of the
// connection's credentials: the server lets an identity publish under its
// own name only (Credentials returns it with the connection's options).
func As(p events.Principal) Option { return func(c *Client) { c.as = p } }

// WithSource sets the CloudEvents source of events the client builds.
func WithSource(src string) Option { return func(c *Client) { c.source = src } }

// New returns a client on a connection.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("rath client: %w", err)
	}
	c := &Client{nc: nc, js: js, as: events.DefaultClient, timeout: 10 * time.Second, retry: eventstore.RetryHorizon, source: "rath/client"}
	for _, o := range opts {
		o(c)
	}
	if err := c.as.Validate(); err != nil {
		return nil, fmt.Errorf("rath client: %w", err)
	}
	return c, nil
}

// Conn returns the client's connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// Principal returns who the client asks as.
func (c *Client) Principal() events.Principal { return c.as }

// Start starts a session. An empty id lets the ledger choose one; the ack
// names it.
func (c *Client) Start(ctx context.Context, id string, data events.SessionStarted, opts ...events.Option) (api.Ack, error) {
	ev, err := events.New(id, &data, append([]events.Option{events.WithSource(c.source)}, opts...)...)
	if err != nil {
		return api.Ack{}, err
	}
	return c.Append(ctx, ev)
}

// Emit builds an event of a registered kind for a session and appends it.
func (c *Client) Emit(ctx context.Context, sessionID string, data any, opts ...events.Option) (api.Ack, error) {
	ev, err := events.New(sessionID, data, append([]events.Option{events.WithSource(c.source)}, opts...)...)
	if err != nil {
		return api.Ack{}, err
	}
	return c.Append(ctx, ev)
}

// Append proposes an event and waits for the ledger's decision. Transient
// failures are retried with the same event ID, so the event is stored at most
// once; a refusal returns an *api.Error naming the problem.
func (c *Client) Append(ctx context.Context, ev event.Event) (api.Ack, error) {
	body, err := events.Marshal(ev)
	if err != nil {
		return api.Ack{}, fmt.Errorf("append %s: %w", ev.ID(), err)
	}
	msg := nats.NewMsg(c.as.Ledger(events.OpAppend))
	msg.Header.Set("Content-Type", events.ContentTypeStructured)
	msg.Data = body
	var a api.Ack
	if err := c.callWithin(ctx, msg, &a, appendAttempt+time.Duration(len(body))*time.Second/(1<<20)); err != nil {
		return api.Ack{}, fmt.Errorf("append %s to session %s: %w", ev.ID(), ev.Subject(), err)
	}
	return a, nil
}

// Propose publishes an event to the inbox and returns once JetStream holds
// it: the ledger decides later, even if it is down now. Rejections are
// recorded on the rejections stream (see Rejections).
func (c *Client) Propose(ctx context.Context, ev event.Event) error {
	body, err := events.Marshal(ev)
	if err != nil {
		return fmt.Errorf("propose %s: %w", ev.ID(), err)
	}
	msg := nats.NewMsg(c.as.Inbox(ev.Subject()))
	msg.Header.Set("Content-Type", events.ContentTypeStructured)
	msg.Data = body
	tracing.Inject(ctx, msg.Header)
	// The inbox deduplicates by message ID: scoped by principal, one user's
	// IDs never block another's proposals.
	if _, err := c.js.PublishMsg(ctx, msg, jetstream.WithMsgID(c.as.String()+"/"+ev.ID())); err != nil {
		return fmt.Errorf("propose %s to session %s: %w", ev.ID(), ev.Subject(), err)
	}
	return nil
}

// State returns the whole state of a session at its head, as the ledger
// holds it (the state operation asked for the whole state, in parts when
// it exceeds a message). Most callers need only the bounded view (see
// Overview), which is much smaller.
func (c *Client) State(ctx context.Context, id string) (*session.State, error) {
	return c.StateAt(ctx, id, 0)
}

// StateAt is State at sequence seq: the state after the session's event
// seq, or an error matching api.ErrOutOfRange if the session has no event
// seq yet. StateAt(ctx, id, 0) is State(ctx, id).
func (c *Client) StateAt(ctx context.Context, id string, seq uint64) (*session.State, error) {
	req := api.StateRequest{Session: id, At: seq, Whole: true}
	var body []byte
	sum := ""
	for {
		var p api.StatePart
		if err := c.request(ctx, c.as.Ledger(events.OpState), req, &p); err != nil {
			return nil, fmt.Errorf("state of %s at %d: %w", id, seq, err)
		}
		if p.Part != req.Part || p.Part >= p.Parts || req.At != 0 && p.Seq != req.At || sum != "" && p.Sum != sum {
			return nil, fmt.Errorf("state of %s at %d: asked for part %d at %d, the ledger answered part %d of %d at %d", id, seq, req.Part, req.At, p.Part, p.Parts, p.Seq)
		}
		body, sum = append(body, p.Data...), p.Sum
		if p.Part+1 == p.Parts {
			break
		}
		req.At, req.Part = p.Seq, p.Part+1
	}
	if got := sha256.Sum256(body); hex.EncodeToString(got[:]) != sum {
		return nil, fmt.Errorf("state of %s at %d: its parts do not join into the state the ledger summed", id, seq)
	}
	var st session.State
	if err := jsondec.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("state of %s at %d: %w", id, seq, err)
	}
	return &st, nil
}

// Overview returns the bounded view of a session that the ledger's state
// operation answers (at req.At, 0: the head): status, lineage, usage,
// counters, pending work, approvals, tool calls in flight, head, and the
// counts and last entries of the transcript and the other long lists. Its
// size is bounded whatever the session holds (session.MaxOverviewBytes).
func (c *Client) Overview(ctx context.Context, req api.StateRequest) (*session.Overview, error) {
	var v session.Overview
	if err := c.request(ctx, c.as.Ledger(events.OpState), req, &v); err != nil {
		return nil, fmt.Errorf("state of %s at %d: %w", req.Session, req.At, err)
	}
	return &v, nil
}

// List returns every session f selects (f.Limit and f.After are ignored),
// asking the ledger a page at a time, so that no reply grows with the
// number of sessions.
func (c *Client) List(ctx context.Context, f api.ListRequest) ([]api.Session, error) {
	f.Limit, f.After = listPage, ""
	var out []api.Session
	for {
		r, err := c.ListPage(ctx, f)
		if err != nil {
			return nil, err
		}
		out = append(out, r.Sessions...)
		if r.Next == "" {
			return out, nil
		}
		f.After = r.Next
	}
}

// listPage is how many sessions List asks for at once: about 300 KB.
const listPage = 1000

// ListPage returns one page of the sessions f selects (f.Limit of them from
// after f.After; every one when f.Limit is 0), the next page's cursor and
// how many f selects in all.
//
//	page, err := c.ListPage(ctx, ledgerapi.ListRequest{Order: "active", Limit: 50})
//	// then ListRequest{..., After: page.Next} while page.Next != ""
func (c *Client) ListPage(ctx context.Context, f api.ListRequest) (api.ListReply, error) {
	var r api.ListReply
	if err := c.request(ctx, c.as.Ledger(events.OpList), f, &r); err != nil {
		return api.ListReply{}, fmt.Errorf("list sessions: %w", err)
	}
	return r, nil
}

// Lineage returns the lineage graph around a session.
func (c *Client) Lineage(ctx context.Context, id string) (api.Graph, error) {
	var g api.Graph
	if err := c.request(ctx, c.as.Ledger(events.OpLineage), api.SessionRequest{Session: id}, &g); err != nil {
		return api.Graph{}, fmt.Errorf("lineage of %s: %w", id, err)
	}
	return g, nil
}

// Fork branches a session after sequence req.At (0: its head).
func (c *Client) Fork(ctx context.Context, req api.ForkRequest) (api.Ack, error) {
	if req.EventID == "" {
		req.EventID = events.NewID() // chosen once, so retries fork once
	}
	if req.EventSource == "" {
		req.EventSource = c.source
	}
	var a api.Ack
	if err := c.request(ctx, c.as.Ledger(events.OpFork), req, &a); err != nil {
		return api.Ack{}, fmt.Errorf("fork %s at %d: %w", req.Parent, req.At, err)
	}
	return a, nil
}

// Merge merges req.Source into req.Target.
func (c *Client) Merge(ctx context.Context, req api.MergeRequest) (api.Ack, error) {
	if req.EventID == "" {
		req.EventID = events.NewID()
	}
	if req.EventSource == "" {
		req.EventSource = c.source
	}
	var a api.Ack
	if err := c.request(ctx, c.as.Ledger(events.OpMerge), req, &a); err != nil {
		return api.Ack{}, fmt.Errorf("merge %s into %s: %w", req.Source, req.Target, err)
	}
	return a, nil
}

// Verify recomputes a session's hash chain through its fork ancestry.
func (c *Client) Verify(ctx context.Context, id string) (api.Report, error) {
	var r api.Report
	if err := c.request(ctx, c.as.Ledger(events.OpVerify), api.SessionRequest{Session: id}, &r); err != nil {
		return api.Report{}, fmt.Errorf("verify %s: %w", id, err)
	}
	return r, nil
}

// Keys returns the public keys the ledger signs with and accepts. A verifier
// that trusts them because the ledger said so trusts the ledger: pin the key
// file (<data>/keys/ledger.pub) instead where it matters.
func (c *Client) Keys(ctx context.Context) (api.Keys, error) {
	var k api.Keys
	if err := c.request(ctx, c.as.Ledger(events.OpKeys), struct{}{}, &k); err != nil {
		return api.Keys{}, fmt.Errorf("ledger keys: %w", err)
	}
	return k, nil
}

// Tools lists the tools registered in the deployment's tool registry.
func (c *Client) Tools(ctx context.Context) ([]api.Tool, error) {
	var t api.Tools
	if err := c.request(ctx, c.as.Ledger(events.OpTools), struct{}{}, &t); err != nil {
		return nil, fmt.Errorf("ledger tools: %w", err)
	}
	return t.Tools, nil
}

// Keyring returns the ledger's keys as a keyring (see Keys).
func (c *Client) Keyring(ctx context.Context) (events.Keyring, error) {
	k, err := c.Keys(ctx)
	if err != nil {
		return nil, err
	}
	return KeyringOf(k)
}

// KeyringOf turns a Keys reply into a keyring, checking each key's ID.
func KeyringOf(k api.Keys) (events.Keyring, error) {
	var keys []events.PublicKey
	for _, key := range k.Keys {
		pub, err := events.DecodeNamedKey(key.ID, key.PublicKey)
		if err != nil {
			return nil, err
		}
		keys = append(keys, pub)
	}
	return events.NewKeyring(keys...), nil
}

// Schema returns the JSON Schema of an event type's data.
func (c *Client) Schema(ctx context.Context, typ string) (json.RawMessage, error) {
	var raw json.RawMessage
	if err := c.request(ctx, c.as.Ledger(events.OpSchema), api.SchemaRequest{Type: typ}, &raw); err != nil {
		return nil, fmt.Errorf("schema of %s: %w", typ, err)
	}
	return raw, nil
}

// Rejections calls fn for each recorded rejection of the client's tenant
// (of every tenant, for a service), of one session or all, oldest first.
func (c *Client) Rejections(ctx context.Context, sessionID string, fn func(eventstore.Rejection) error) error {
	req := api.RejectionsRequest{Session: sessionID}
	for {
		var page api.RejectionsReply
		if err := c.request(ctx, c.as.Ledger(events.OpRejections), req, &page); err != nil {
			return fmt.Errorf("rejections: %w", err)
		}
		for _, raw := range page.Rejections {
			var r eventstore.Rejection
			if err := json.Unmarshal(raw, &r); err != nil {
				return fmt.Errorf("rejections: %w", err)
			}
			if err := fn(r); err != nil {
				return err
			}
		}
		if !page.More {
			return nil
		}
		req.After = page.Next
	}
}

// PutBlob stores evidence (a workflow bundle, a file) by content through the
// ledger and returns its reference (sha256:<hex>). It must fit in one
// message.
func (c *Client) PutBlob(ctx context.Context, data []byte) (string, error) {
	msg := nats.NewMsg(c.as.Ledger(events.OpPutBlob))
	msg.Data = data
	var r api.BlobRef
	if err := c.call(ctx, msg, &r); err != nil {
		return "", fmt.Errorf("put blob of %d bytes: %w", len(data), err)
	}
	return r.Ref, nil
}

// GetBlob reads a blob by reference, page by page, and checks it against
// its hash.
func (c *Client) GetBlob(ctx context.Context, ref string) ([]byte, error) {
	var out []byte
	for {
		var page api.BlobReply
		if err := c.request(ctx, c.as.Ledger(events.OpGetBlob), api.BlobRequest{Ref: ref, Offset: int64(len(out))}, &page); err != nil {
			return nil, fmt.Errorf("get blob %s: %w", ref, err)
		}
		if page.Offset != int64(len(out)) || page.Size < int64(len(out)+len(page.Data)) {
			return nil, fmt.Errorf("get blob %s: page at %d of %d bytes does not follow %d bytes read", ref, page.Offset, page.Size, len(out))
		}
		if out == nil {
			out = make([]byte, 0, page.Size)
		}
		out = append(out, page.Data...)
		if int64(len(out)) == page.Size {
			break
		}
		if len(page.Data) == 0 {
			return nil, fmt.Errorf("get blob %s: empty page at %d of %d bytes", ref, len(out), page.Size)
		}
	}
	if got := eventstore.BlobRef(out); got != ref {
		return nil, fmt.Errorf("get blob %s: content does not match its hash (%s)", ref, got)
	}
	return out, nil
}

func (c *Client) request(ctx context.Context, subject string, req, out any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(subject)
	msg.Data = body
	return c.call(ctx, msg, out)
}

// call sends a request and decodes the reply, retrying transient failures
// (no ledger listening, timeouts, conflicts) with backoff for up to the retry
// horizon. Requests are idempotent: proposals carry their event ID.
func (c *Client) call(ctx context.Context, msg *nats.Msg, out any) error {
	return c.callWithin(ctx, msg, out, c.timeout)
}

// appendAttempt bounds the first wait for the answer to an append (plus a
// second per MiB of event); each retry doubles the bound, up to the
// request timeout (WithTimeout). A
// ledger answers an append in milliseconds (up to a second on a saturated
// machine, which a shorter bound would flood with repeats). No answer within
// three seconds means the ledger lost its NATS server with the request (its answer is
// then refused by the server it reconnects to, which never saw the
// request) or is stuck: asking again, with the same event ID, reaches a live
// ledger, which stores the event once, or answers with the original's ack.
const appendAttempt = 3 * time.Second

// callWithin is call with the first attempt bounded by first (at most the
// request timeout). An attempt that leaves no time to retry waits the
// whole request timeout.
func (c *Client) callWithin(ctx context.Context, msg *nats.Msg, out any, first time.Duration) error {
	deadline := time.Now().Add(c.retry)
	backoff := 20 * time.Millisecond
	for bound := min(first, c.timeout); ; bound = min(2*bound, c.timeout) {
		if time.Now().Add(bound + backoff).After(deadline) {
			bound = c.timeout
		}
		err := c.once(ctx, msg, out, bound)
		if err == nil || api.Permanent(err) && !isTransport(err) {
			return err
		}
		if time.Now().Add(backoff).After(deadline) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// transportError marks a failure to reach the ledger, always worth a retry.
type transportError struct{ err error }

func (e *transportError) Error() string { return e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// Is makes errors.Is(err, api.ErrUnavailable) hold for a ledger that did
// not answer, as api.CodeOf reports CodeUnavailable for it.
func (e *transportError) Is(target error) bool { return target == api.ErrUnavailable }

func isTransport(err error) bool {
	var t *transportError
	return errors.As(err, &t)
}

func (c *Client) once(ctx context.Context, msg *nats.Msg, out any, timeout time.Duration) error {
	tracing.Inject(ctx, msg.Header)
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	reply, err := c.nc.RequestMsgWithContext(rctx, msg)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &transportError{fmt.Errorf("no answer on %s: %w", msg.Subject, err)}
	}
	if code := reply.Header.Get(api.HeaderError); code != "" {
		var er api.ErrorReply
		if err := json.Unmarshal(reply.Data, &er); err != nil || er.Error == nil {
			return &api.Error{Code: api.Code(code), Message: string(reply.Data)}
		}
		return er.Error
	}
	if err := jsondec.Unmarshal(reply.Data, out); err != nil {
		return fmt.Errorf("reply on %s: %w", msg.Subject, err)
	}
	return nil
}
