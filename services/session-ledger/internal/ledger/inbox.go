package ledger

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// The inbox holds fire-and-forget proposals until a ledger has decided them.
// Order is kept per session by construction, not by delivery: before deciding
// a proposal, a ledger decides every older proposal of the same session still
// in the inbox (the work queue drops a proposal once it is acked). So neither
// a ledger killed with proposals unacked, nor a redelivery, nor several
// ledgers consuming at once can reorder a session's proposals.
const (
	inboxShards   = 32
	inboxAckWait  = 30 * time.Second
	inboxRetryFor = eventstore.RetryHorizon
)

// inboxRun is the running inbox consumer.
type inboxRun struct {
	cc       jetstream.ConsumeContext
	shards   []chan jetstream.Msg
	stopping chan struct{}
	wg       sync.WaitGroup
}

// stop stops fetching, lets every shard finish what it holds, and returns.
// Unacked proposals stay in the inbox for the next ledger: none is lost.
func (r *inboxRun) stop() {
	r.cc.Drain()
	<-r.cc.Closed()
	close(r.stopping)
	for _, s := range r.shards {
		close(s)
	}
	r.wg.Wait()
}

// consumeInbox decides fire-and-forget proposals. Proposals are spread over
// shards by session, so one session's proposals are decided one at a time
// while different sessions' proceed in parallel. A proposal is acked only
// after its event (or its rejection) is stored.
func (l *Ledger) consumeInbox(ctx context.Context) (*inboxRun, error) {
	js := l.store.JetStream()
	cons, err := js.CreateOrUpdateConsumer(ctx, events.StreamInbox, jetstream.ConsumerConfig{
		Durable:       events.InboxConsumer,
		Description:   "Rath ledgers: decide fire-and-forget proposals",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       inboxAckWait,
		MaxAckPending: 4096,
	})
	if err != nil {
		return nil, fmt.Errorf("inbox consumer: %w", err)
	}
	run := &inboxRun{shards: make([]chan jetstream.Msg, inboxShards), stopping: make(chan struct{})}
	for i := range run.shards {
		ch := make(chan jetstream.Msg, 64)
		run.shards[i] = ch
		run.wg.Add(1)
		go func() {
			defer run.wg.Done()
			for m := range ch {
				l.decideInbox(context.WithoutCancel(ctx), m, run.stopping)
			}
		}()
	}
	run.cc, err = cons.Consume(func(m jetstream.Msg) {
		// By session, whoever proposed: one session's proposals are
		// decided by one shard, in order.
		h := fnv.New32a()
		h.Write([]byte(inboxSession(m.Subject())))
		run.shards[h.Sum32()%inboxShards] <- m
	}, jetstream.PullMaxMessages(512),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			l.log.Debug("inbox consumer", "err", err)
		}))
	if err != nil {
		return nil, fmt.Errorf("consume inbox: %w", err)
	}
	return run, nil
}

// inboxSession is the session a proposal was published for: the last
// token of rath.inbox.<tenant>.<user>.<session> ("new" for a session start
// that lets the ledger choose).
func inboxSession(subject string) string {
	return subject[strings.LastIndexByte(subject, '.')+1:]
}

// decideInbox decides one delivered proposal, retrying transient failures
// in place (keeping the session's order) for up to inboxRetryFor. A proposal
// that still cannot be decided then is recorded as a rejection.
func (l *Ledger) decideInbox(ctx context.Context, m jetstream.Msg, stopping <-chan struct{}) {
	meta, err := m.Metadata()
	if err != nil {
		l.log.Error("inbox message without metadata", "err", err)
		_ = m.Term()
		return
	}
	msg := &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
	p, sid, perr := events.ParseInbox(m.Subject())
	if p.Validate() == nil {
		ctx = withPrincipal(ctx, p) // its refusals are filed under its tenant
	}
	if perr != nil {
		// Not a session's subject (a wildcard or an empty token published
		// literally, say): refused as malformed, outside any session's
		// order, and never used to look up other proposals.
		if _, err := l.propose(ctx, msg, "inbox", inboxKey(meta.Sequence.Stream)); err != nil && !api.Permanent(err) {
			_ = m.Nak()
			return
		}
		_ = m.DoubleAck(ctx)
		return
	}
	deadline := time.Now().Add(inboxRetryFor)
	for attempt := 0; ; attempt++ {
		err := l.decideInOrder(ctx, sid, meta.Sequence.Stream, msg)
		if err == nil {
			if err := m.DoubleAck(ctx); err != nil {
				l.log.Warn("inbox ack lost; the proposal will be redelivered and deduplicated", "err", err)
			}
			return
		}
		if time.Now().After(deadline) {
			refusal := api.Errorf(api.CodeUnavailable, "not decided after %s: %v", inboxRetryFor, err)
			ev, _ := events.FromNATS(msg.Header, msg.Data) // for the record: session, ID, type
			if rerr := l.recordRejection(ctx, msg, "inbox", ev, refusal, inboxKey(meta.Sequence.Stream)); errors.Is(rerr, refusal) {
				_ = m.DoubleAck(ctx)
				return
			}
		}
		l.log.Warn("inbox proposal not decided yet; retrying", "subject", m.Subject(), "attempt", attempt+1, "err", err)
		_ = m.InProgress()
		t := time.NewTimer(min(50*time.Millisecond<<min(attempt, 6), 3*time.Second))
		select {
		case <-stopping:
			t.Stop()
			_ = m.Nak() // the next ledger takes it, still in order
			return
		case <-t.C:
		}
	}
}

// decideInOrder decides the session's older proposals still in the inbox,
// then this one (sid "": a start that lets the ledger choose the ID). Only transient failures are returned: a refusal is recorded
// and counts as decided.
func (l *Ledger) decideInOrder(ctx context.Context, sid string, seq uint64, msg *nats.Msg) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if sid != "" {
		for {
			first, err := l.store.FirstProposal(ctx, sid)
			if errors.Is(err, eventstore.ErrNotFound) || err == nil && first.StreamSeq >= seq {
				break
			}
			if err != nil {
				return err
			}
			// An older proposal is waiting (its ledger died before acking, or
			// it awaits redelivery): it goes first.
			older := &nats.Msg{Subject: first.Subject, Header: first.Header, Data: first.Body}
			if _, err := l.propose(ctx, older, "inbox", inboxKey(first.StreamSeq)); err != nil && !api.Permanent(err) {
				return err
			}
			if err := l.store.RemoveProposal(ctx, first.StreamSeq); err != nil {
				return err
			}
		}
	}
	if _, err := l.propose(ctx, msg, "inbox", inboxKey(seq)); err != nil && !api.Permanent(err) {
		return err
	}
	return nil
}

// inboxKey deduplicates the rejection of one inbox proposal, which may be
// decided twice (out of turn, then on its own delivery).
func inboxKey(seq uint64) string { return fmt.Sprintf("inbox-%d", seq) }

// checkInboxSubject ties a proposal to the inbox subject it was published on,
// which is what orders it: rath.inbox.<session> carries that session's
// events (a start without a subject takes the session ID from it), and
// rath.inbox.new only session starts.
func checkInboxSubject(subject string, ev *event.Event) error {
	p, sid, err := events.ParseInbox(subject)
	if err != nil {
		return api.Errorf(api.CodeMalformed, "%v", err)
	}
	if sid == "" {
		if ev.Type() != events.TypeSessionStarted {
			return api.Errorf(api.CodeMalformed, "%s takes session starts only, got %s: publish on %s", subject, ev.Type(), p.Inbox("<session>"))
		}
		return nil
	}
	if ev.Subject() == "" && ev.Type() == events.TypeSessionStarted {
		ev.SetSubject(sid)
	}
	if ev.Subject() != sid {
		return api.Errorf(api.CodeMalformed, "published on %s but names session %q: the inbox subject must be the event's session", subject, ev.Subject())
	}
	return nil
}
