package rathwatermill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// TopicAll is the topic of every session of the tenant: a subscription to
// it delivers the events of all of them; a message published to it goes to
// the session its MetadataSession names.
const TopicAll = "*"

// ErrClosed is returned by Subscribe and Publish after Close.
var ErrClosed = errors.New("rathwatermill: closed")

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// Consumer names the durable feed (ledgerapi.PullRequest): subscribers
	// of the tenant with the same Consumer and topic share one position
	// and one stream of deliveries, across restarts. Required; never derive
	// it from a Go identifier: renaming it replays the feed from the start.
	Consumer string
	// Types are the event types delivered (empty: every type). Events of
	// other types are acked without being delivered.
	Types []string
	// Marshaler turns stored events into messages (default JSONMarshaler).
	Marshaler Marshaler
	// NackDelay is how long a nacked event waits before it is delivered
	// again (default 1s).
	NackDelay time.Duration
	// Poll is how often an idle subscription asks the ledger anyway
	// (default 2s): the live subject wakes it for new events, the poll
	// finds events given back by a nack or an expired ack wait.
	Poll time.Duration
	// SettleTimeout bounds the ack or nack of one event (default 10s).
	SettleTimeout time.Duration
	// Logger logs what a subscription cannot hand to its caller (default
	// watermill.NopLogger).
	Logger watermill.LoggerAdapter
}

func (c *SubscriberConfig) setDefaults() {
	if c.Marshaler == nil {
		c.Marshaler = JSONMarshaler{}
	}
	if c.NackDelay == 0 {
		c.NackDelay = time.Second
	}
	if c.Poll == 0 {
		c.Poll = 2 * time.Second
	}
	if c.SettleTimeout == 0 {
		c.SettleTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = watermill.NopLogger{}
	}
}

// Validate reports every problem of the configuration at once.
func (c SubscriberConfig) Validate() error {
	var errs []error
	if err := api.ValidateFeed(c.Consumer); err != nil {
		errs = append(errs, fmt.Errorf("consumer: %w", err))
	}
	for _, t := range c.Types {
		if _, ok := events.Lookup(t); !ok {
			errs = append(errs, fmt.Errorf("types: %w", &events.UnknownTypeError{Type: t}))
		}
	}
	if c.NackDelay < 0 || c.Poll < 0 || c.SettleTimeout < 0 {
		errs = append(errs, fmt.Errorf("durations must not be negative (nack delay %s, poll %s, settle timeout %s)", c.NackDelay, c.Poll, c.SettleTimeout))
	}
	return errors.Join(errs...)
}

// Subscriber delivers a tenant's stored session events as Watermill
// messages, through the ledger's durable feeds. It is a message.Subscriber.
type Subscriber struct {
	c   *client.Client
	cfg SubscriberConfig

	closing   chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// NewSubscriber returns a subscriber reading as the client's principal.
func NewSubscriber(c *client.Client, cfg SubscriberConfig) (*Subscriber, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("rathwatermill subscriber: %w", err)
	}
	return &Subscriber{c: c, cfg: cfg, closing: make(chan struct{})}, nil
}

// topicSession is the session a topic names ("" for TopicAll).
func topicSession(topic string) (string, error) {
	if topic == TopicAll {
		return "", nil
	}
	if err := events.ValidateSessionID(topic); err != nil {
		return "", fmt.Errorf("topic %q is neither a session ID nor %q: %w", topic, TopicAll, err)
	}
	return topic, nil
}

// Subscribe delivers the events of topic's feed on the returned channel,
// one at a time: the next is delivered once the last was acked or nacked.
// The channel is closed when ctx ends or the subscriber is closed; an event
// delivered then and not acked is given back to the feed.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	select {
	case <-s.closing:
		return nil, ErrClosed
	default:
	}
	sessionID, err := topicSession(topic)
	if err != nil {
		return nil, err
	}
	// The live subject is a doorbell: any event stored for the feed's
	// sessions wakes the subscription, which then asks the ledger.
	bell := make(chan struct{}, 1)
	tenant := s.c.Principal().Tenant
	if s.c.Principal().IsService() {
		tenant = ""
	}
	filter := events.TenantLiveWildcard(tenant)
	if tenant == "" {
		filter = events.LiveWildcard
	}
	if sessionID != "" {
		filter = events.LiveFilter(tenant, sessionID)
	}
	sub, err := s.c.Conn().Subscribe(filter, func(*nats.Msg) {
		select {
		case bell <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe to %s: %w", topic, err)
	}
	out := make(chan *message.Message)
	f := &feed{s: s, req: api.PullRequest{Consumer: s.cfg.Consumer, Session: sessionID}, out: out, bell: bell, topic: topic}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer func() { _ = sub.Unsubscribe() }()
		f.run(ctx)
	}()
	return out, nil
}

// Close stops every subscription, gives back the events delivered and not
// yet acked, and waits until each subscription's channel is closed.
func (s *Subscriber) Close() error {
	s.closeOnce.Do(func() { close(s.closing) })
	s.wg.Wait()
	return nil
}

// feed is one subscription.
type feed struct {
	s     *Subscriber
	req   api.PullRequest
	out   chan<- *message.Message
	bell  <-chan struct{}
	topic string
}

func (f *feed) log() watermill.LogFields {
	return watermill.LogFields{"topic": f.topic, "consumer": f.req.Consumer}
}

// run pulls and delivers until ctx ends or the subscriber closes.
func (f *feed) run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-f.s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	wait := time.Duration(0)
	for {
		if wait > 0 && !f.idle(ctx, wait) {
			return
		}
		if ctx.Err() != nil {
			return
		}
		reply, err := f.pull()
		if errors.Is(err, api.ErrNotFound) {
			// The topic's session is not started yet (the ledger has no
			// feed of a session it does not know): the doorbell rings on
			// its first event.
			wait = f.s.cfg.Poll
			continue
		}
		if err != nil {
			f.s.cfg.Logger.Error("pull failed, asking again", err, f.log())
			wait = f.s.cfg.Poll
			continue
		}
		if len(reply.Events) == 0 {
			wait = f.s.cfg.Poll
			continue
		}
		wait = 0
		for _, p := range reply.Events {
			delay, ok := f.deliver(ctx, p)
			if !ok {
				return
			}
			wait = max(wait, delay)
		}
	}
}

// pull asks the ledger for the feed's next event. It is not cancelled when
// the subscription ends, only bounded: an event the ledger hands out to an
// asker that left stays with it until the feed's ack wait expires, and
// holds back the whole feed meanwhile; an event that arrives after the end
// is given back by deliver.
func (f *feed) pull() (api.PullReply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), f.s.cfg.SettleTimeout)
	defer cancel()
	return f.s.c.Pull(ctx, f.req)
}

// idle waits for the doorbell or d; false when the subscription ends.
func (f *feed) idle(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-f.bell:
	case <-t.C:
	}
	return true
}

// deliver hands one pulled event to the caller and settles it as the
// caller says: after an ack it is done, after a nack (or a subscription
// that ends before either) it goes back to the feed. It returns how long
// to wait before pulling again, and false when the subscription ended.
func (f *feed) deliver(ctx context.Context, p api.Pulled) (time.Duration, bool) {
	ev, err := events.ParseStored(p.Event)
	if err != nil {
		f.s.cfg.Logger.Error("undecodable event from the ledger, given back", err, f.log())
		f.settle(p, true, f.s.cfg.NackDelay)
		return f.s.cfg.NackDelay, true
	}
	if len(f.s.cfg.Types) > 0 && !slices.Contains(f.s.cfg.Types, ev.Type) {
		f.settle(p, false, 0)
		return 0, true
	}
	msg, err := f.s.cfg.Marshaler.Unmarshal(ev)
	if err != nil {
		f.s.cfg.Logger.Error("event not unmarshalled, given back", err, f.log())
		f.settle(p, true, f.s.cfg.NackDelay)
		return f.s.cfg.NackDelay, true
	}
	msg.Metadata.Set(MetadataDelivered, fmt.Sprint(p.Delivered))
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msg.SetContext(mctx)
	select {
	case f.out <- msg:
	case <-ctx.Done():
		f.settle(p, true, 0)
		return 0, false
	}
	// A handler that runs longer than the feed's ack wait keeps its event:
	// without a word, the feed would deliver it again to another member.
	beat := time.NewTicker(api.PullAckWait / 3)
	defer beat.Stop()
	for {
		select {
		case <-msg.Acked():
			f.settle(p, false, 0)
			return 0, true
		case <-msg.Nacked():
			f.settle(p, true, f.s.cfg.NackDelay)
			return f.s.cfg.NackDelay, true
		case <-beat.C:
			f.progress(p)
		case <-ctx.Done():
			f.settle(p, true, 0)
			return 0, false
		}
	}
}

// progress restarts a pulled event's ack wait.
func (f *feed) progress(p api.Pulled) {
	ctx, cancel := context.WithTimeout(context.Background(), f.s.cfg.SettleTimeout)
	defer cancel()
	r := api.SettleRequest{Consumer: f.req.Consumer, Session: f.req.Session, Token: p.Token, Progress: true}
	if err := f.s.c.Settle(ctx, r); err != nil {
		f.s.cfg.Logger.Error("event's ack wait not extended", err, f.log())
	}
}

// settle acks or nacks a pulled event. It runs on its own deadline, so an
// event delivered before a shutdown is still settled; one that cannot be
// settled comes back after the feed's ack wait (at least once).
func (f *feed) settle(p api.Pulled, nack bool, delay time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), f.s.cfg.SettleTimeout)
	defer cancel()
	r := api.SettleRequest{Consumer: f.req.Consumer, Session: f.req.Session, Token: p.Token, Nack: nack, DelayMS: delay.Milliseconds()}
	if err := f.s.c.Settle(ctx, r); err != nil {
		f.s.cfg.Logger.Error("event not settled: the feed delivers it again after its ack wait", err, f.log())
	}
}
