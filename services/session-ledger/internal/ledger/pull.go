package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
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

// name is the durable consumer's name: the tenant's feed prefix
// (feedPrefix, by which its feeds are counted) and a digest of the tenant,
// the feed's name and its session, so that names of different tenants
// never meet (tenant and feed names may both hold '-' and '_').
func (f feed) name() string {
	sum := sha256.Sum256([]byte(f.tenant + "\x00" + f.consumer + "\x00" + f.session))
	return feedPrefix(f.tenant) + hex.EncodeToString(sum[:12])
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

// feedConsumer returns the feed's durable consumer, creating it on first
// use within the tenant's quota of feeds (a pull; a settle only finds it).
// Every ledger creates it with the same configuration, so creating it again
// is a no-op.
func (l *Ledger) feedConsumer(ctx context.Context, f feed, create bool) (jetstream.Consumer, error) {
	name := f.name()
	if c, ok := l.feeds.Load(name); ok {
		return c.(jetstream.Consumer), nil
	}
	js := l.store.JetStream()
	if p := principalOf(ctx); bound(p) || !create {
		if create {
			unlock, err := l.lockFeeds(ctx, f.tenant)
			if err != nil {
				return nil, err
			}
			defer unlock()
		}
		c, err := js.Consumer(ctx, events.StreamSessions, name)
		switch {
		case err == nil:
			l.feeds.Store(name, c)
			return c, nil
		case !errors.Is(err, jetstream.ErrConsumerNotFound):
			return nil, unavailable(fmt.Errorf("feed %s: %w", f.consumer, err))
		case !create:
			return nil, api.Errorf(api.CodeStale, "feed %q%s does not exist (nobody pulled it for %s, or an operator removed it): nothing settled; a pull starts it anew, from the first event", f.consumer, sessionNote(f.session), api.FeedIdle)
		}
		if err := l.admitFeed(ctx, f, p); err != nil {
			return nil, err
		}
	}
	c, err := js.CreateOrUpdateConsumer(ctx, events.StreamSessions, jetstream.ConsumerConfig{
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
		// A feed no one pulls for a week is removed by the server (its
		// position with it: the next pull starts it again from the first
		// event), so feeds users stop using do not pile up.
		InactiveThreshold: api.FeedIdle,
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
	if r.Max < 0 || r.Max > api.MaxPull {
		return nil, api.Errorf(api.CodeMalformed, "max %d: a pull answers at most %d event (0: the default)", r.Max, api.MaxPull)
	}
	f, err := feedOf(ctx, r.Consumer, r.Session)
	if err != nil {
		return nil, err
	}
	leave, err := l.enterPull(principalOf(ctx))
	if err != nil {
		return nil, err
	}
	defer leave()
	if f.session != "" {
		// A session of another tenant does not exist for the asker, as
		// for every other operation; nor does one not started yet.
		if err := l.readable(ctx, f.session); err != nil {
			return nil, err
		}
	}
	if _, err := l.feedConsumer(ctx, f, true); err != nil {
		return nil, err
	}
	reply := api.PullReply{Events: []api.Pulled{}}
	msg, err := l.nextOf(ctx, f)
	if err != nil || msg == nil {
		return reply, err
	}
	// $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>
	tokens := strings.Split(msg.Reply, ".")
	if len(tokens) != 9 {
		return nil, unavailable(fmt.Errorf("pull feed %s: unexpected ack subject %q", f.consumer, msg.Reply))
	}
	delivered, _ := strconv.ParseUint(tokens[4], 10, 64)
	ev, err := events.ParseStored(msg.Data)
	if err != nil {
		return nil, unavailable(fmt.Errorf("pull feed %s: stream sequence %s: %w", f.consumer, tokens[5], err))
	}
	body, err := l.readOut(ctx, ev, msg.Data)
	if err != nil {
		return nil, unavailable(fmt.Errorf("pull feed %s: %w", f.consumer, err))
	}
	reply.Events = append(reply.Events, api.Pulled{Event: json.RawMessage(body), Token: msg.Reply, Delivered: delivered})
	return reply, nil
}

// pullWait is how long JetStream may hold a pull of a feed whose one event
// is out with another puller (it answers at once when the feed is empty
// or has an event ready); pullMargin is how much longer the ledger listens.
// A pull JetStream holds is answered with the next event that becomes
// ready, so the ledger must still be listening then: an event sent to a
// listener that left is lost to its feed until the ack wait expires
// (api.PullAckWait).
const (
	pullWait   = time.Second
	pullMargin = 4 * time.Second
)

// nextOf asks the feed's consumer for its next event (nil: none now, or the
// one event is out with another puller). It asks on an inbox of its own,
// dropped afterwards, rather than through a shared reply subscription
// (nats.Conn.Request) or jetstream's FetchNoWait (which listens for one
// second and sets no expiry): JetStream keeps a no-wait pull it cannot
// answer yet, and without an expiry and with its reply subject still
// listened to, it would hand the next event to a request no one awaits.
func (l *Ledger) nextOf(ctx context.Context, f feed) (*nats.Msg, error) {
	nc := l.store.Conn()
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, unavailable(fmt.Errorf("pull feed %s: %w", f.consumer, err))
	}
	defer func() { _ = sub.Unsubscribe() }()
	subject := "$JS.API.CONSUMER.MSG.NEXT." + events.StreamSessions + "." + f.name()
	req := fmt.Appendf(nil, `{"batch":1,"no_wait":true,"expires":%d}`, pullWait.Nanoseconds())
	if err := nc.PublishRequest(subject, inbox, req); err != nil {
		return nil, unavailable(fmt.Errorf("pull feed %s: %w", f.consumer, err))
	}
	rctx, cancel := context.WithTimeout(ctx, pullWait+pullMargin)
	defer cancel()
	msg, err := sub.NextMsgWithContext(rctx)
	if errors.Is(err, nats.ErrNoResponders) {
		// The consumer is gone (an operator removed the feed). Forget it,
		// so the next pull creates it again.
		l.feeds.Delete(f.name())
		return nil, unavailable(fmt.Errorf("pull feed %s: its consumer %s is gone; ask again to start it anew", f.consumer, f.name()))
	}
	if err != nil {
		return nil, unavailable(fmt.Errorf("pull feed %s: %w", f.consumer, err))
	}
	if msg.Header.Get("Status") != "" || msg.Reply == "" {
		// 404 no messages, 408 expired or requests pending, 409: nothing
		// for now.
		return nil, nil
	}
	return msg, nil
}

// sessionNote names a feed's session in a message, or says it has none.
func sessionNote(session string) string {
	if session == "" {
		return " without a session"
	}
	return " of session " + session
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
		return nil, api.Errorf(api.CodeMalformed, "token %q is not one of feed %q%s of this tenant (a feed is named by its consumer and its session, as pulled)", r.Token, r.Consumer, sessionNote(r.Session))
	}
	if r.DelayMS < 0 {
		return nil, api.Errorf(api.CodeMalformed, "delay_ms %d is negative", r.DelayMS)
	}
	// JetStream settles a message by its stream sequence whichever of its
	// deliveries the token names: a puller that overran the ack wait would
	// settle the event its new holder is working on, and the feed would
	// move on under it, out of order. A token is good only while its
	// delivery is the feed's last one (one event is out at a time). The
	// check and the settlement are two steps, so a redelivery between them
	// still slips through: this narrows the race, it does not close it. A
	// token of a feed since removed and created again passes, and settles
	// nothing (its stream sequence is not out with the new consumer).
	var token struct{ delivered, stream, consumer uint64 }
	for i, p := range []*uint64{&token.delivered, &token.stream, &token.consumer} {
		v, err := strconv.ParseUint(strings.Split(rest, ".")[i], 10, 64)
		if err != nil {
			return nil, api.Errorf(api.CodeMalformed, "token %q is not one of feed %q", r.Token, r.Consumer)
		}
		*p = v
	}
	if f.session != "" {
		if err := l.readable(ctx, f.session); err != nil {
			return nil, err
		}
	}
	c, err := l.feedConsumer(ctx, f, false)
	if err != nil {
		return nil, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return nil, unavailable(fmt.Errorf("settle in feed %s: %w", f.consumer, err))
	}
	if last := info.Delivered.Consumer; token.consumer < last {
		return nil, api.Errorf(api.CodeStale, "token of delivery %d of stream sequence %d is stale: feed %q has delivered since (delivery %d of the feed), and that delivery's holder settles it; nothing settled",
			token.delivered, token.stream, r.Consumer, last)
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
