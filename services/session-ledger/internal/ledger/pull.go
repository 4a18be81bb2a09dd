package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Durable feeds (the pull and settle operations): a tenant's user has no
// JetStream access, so the ledger keeps a durable consumer on
// RATH_SESSIONS for it, filtered to the asker's tenant, and hands out its
// events one at a time with the consumer's own ack tokens. JetStream does
// the delivery bookkeeping (redelivery after a nack or the ack wait, the
// position of the group across restarts); the ledger only checks that a
// principal reads and settles feeds of its own tenant.

// feed is one durable feed: who may use it and what it reads.
type feed struct {
	tenant   string // "" for a service: every tenant
	consumer string
	session  string // "": every session of the tenant
}

// feedOf checks a pull or settle request's feed for the asker.
func feedOf(ctx context.Context, consumer, sessionID string) (feed, error) {
	if err := api.ValidateFeed(consumer); err != nil {
		return feed{}, api.Errorf(api.CodeMalformed, "%v", err)
	}
	if sessionID != "" {
		if err := events.ValidateSessionID(sessionID); err != nil {
			return feed{}, api.Errorf(api.CodeInvalidSession, "%v", err)
		}
	}
	f := feed{consumer: consumer, session: sessionID}
	if p := principalOf(ctx); !p.IsService() {
		f.tenant = p.Tenant
	}
	return f, nil
}

// name is the durable consumer's name: a digest of the tenant, the feed's
// name and its session, so that names of different tenants never meet
// (tenant and feed names may both hold '-' and '_').
func (f feed) name() string {
	sum := sha256.Sum256([]byte(f.tenant + "\x00" + f.consumer + "\x00" + f.session))
	return "feed-" + hex.EncodeToString(sum[:12])
}

func (f feed) describe() string {
	tenant, session := f.tenant, f.session
	if tenant == "" {
		tenant = "every tenant"
	}
	if session == "" {
		session = "every session"
	}
	return fmt.Sprintf("rath feed %q of %s, %s (ledger pull)", f.consumer, tenant, session)
}

// feedConsumer returns the feed's durable consumer, creating it on first use.
// Every ledger creates it with the same configuration, so creating it again
// is a no-op.
func (l *Ledger) feedConsumer(ctx context.Context, f feed) (jetstream.Consumer, error) {
	name := f.name()
	if c, ok := l.feeds.Load(name); ok {
		return c.(jetstream.Consumer), nil
	}
	c, err := l.store.JetStream().CreateOrUpdateConsumer(ctx, events.StreamSessions, jetstream.ConsumerConfig{
		Durable:       name,
		Description:   f.describe(),
		FilterSubject: events.TenantFilter(f.tenant, f.session),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       api.PullAckWait,
		// One event outstanding: a session's events are handled in order
		// by however many processes share the feed.
		MaxAckPending: 1,
		MaxDeliver:    -1,
	})
	if err != nil {
		return nil, unavailable(fmt.Errorf("feed %s: %w", f.consumer, err))
	}
	l.feeds.Store(name, c)
	return c, nil
}

func (l *Ledger) handlePull(ctx context.Context, m *nats.Msg) (any, error) {
	var r api.PullRequest
	if err := decodeRequest(m, &r); err != nil {
		return nil, err
	}
	f, err := feedOf(ctx, r.Consumer, r.Session)
	if err != nil {
		return nil, err
	}
	c, err := l.feedConsumer(ctx, f)
	if err != nil {
		return nil, err
	}
	n := r.Max
	if n <= 0 || n > api.MaxPull {
		n = api.MaxPull
	}
	batch, err := c.FetchNoWait(n)
	if err != nil {
		return nil, unavailable(fmt.Errorf("pull feed %s: %w", f.consumer, err))
	}
	reply := api.PullReply{Events: []api.Pulled{}}
	for msg := range batch.Messages() {
		md, err := msg.Metadata()
		if err != nil {
			return nil, unavailable(fmt.Errorf("pull feed %s: %w", f.consumer, err))
		}
		ev, err := events.ParseStored(msg.Data())
		if err != nil {
			return nil, unavailable(fmt.Errorf("pull feed %s: stream sequence %d: %w", f.consumer, md.Sequence.Stream, err))
		}
		body, err := l.readOut(ctx, ev, msg.Data())
		if err != nil {
			return nil, unavailable(fmt.Errorf("pull feed %s: %w", f.consumer, err))
		}
		reply.Events = append(reply.Events, api.Pulled{Event: json.RawMessage(body), Token: msg.Reply(), Delivered: md.NumDelivered})
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
		return nil, unavailable(fmt.Errorf("pull feed %s: %w", f.consumer, err))
	}
	return reply, nil
}

// settleTimeout bounds the wait for JetStream's confirmation of an ack.
const settleTimeout = 5 * time.Second

func (l *Ledger) handleSettle(ctx context.Context, m *nats.Msg) (any, error) {
	var r api.SettleRequest
	if err := decodeRequest(m, &r); err != nil {
		return nil, err
	}
	f, err := feedOf(ctx, r.Consumer, r.Session)
	if err != nil {
		return nil, err
	}
	// A token is the ack subject JetStream gave the event
	// ($JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>):
	// one of another feed, and so of another tenant, is refused.
	prefix := "$JS.ACK." + events.StreamSessions + "." + f.name() + "."
	rest, ok := strings.CutPrefix(r.Token, prefix)
	if !ok || strings.Count(rest, ".") != 4 || strings.ContainsAny(rest, "*> \t") {
		return nil, api.Errorf(api.CodeMalformed, "token %q is not one of feed %q", r.Token, r.Consumer)
	}
	if r.DelayMS < 0 {
		return nil, api.Errorf(api.CodeMalformed, "delay_ms %d is negative", r.DelayMS)
	}
	body := []byte("+ACK")
	switch {
	case r.Nack && r.Progress:
		return nil, api.Errorf(api.CodeMalformed, "nack and progress: choose one")
	case r.Progress:
		body = []byte("+WPI")
	case r.Nack:
		body = []byte("-NAK")
		if r.DelayMS > 0 {
			body = fmt.Appendf(nil, `-NAK {"delay":%d}`, time.Duration(r.DelayMS)*time.Millisecond)
		}
	}
	// Asked, not published: JetStream answers once it has the ack, so the
	// next pull of the feed finds the event settled.
	rctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	if _, err := l.store.Conn().RequestWithContext(rctx, r.Token, body); err != nil {
		return nil, unavailable(fmt.Errorf("settle in feed %s: %w", f.consumer, err))
	}
	return api.Settled{OK: true}, nil
}
