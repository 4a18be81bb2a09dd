package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/pkg/events"
)

// A session's workspace lives on the runner that placed it (a directory
// under its root, on its host). A call delivered to another runner is handed
// over to the holder by request/reply on a subject named after the holder's
// host and root; "no responders" means the holder is gone, and the runner
// that got the call takes the session over (placing it again, with the loss
// recorded). Handing over avoids both losing a workspace's changes and
// bouncing the call around the consumer until the right runner pulls it.

// handoverPrefix starts the subject each runner answers hand-overs on.
const handoverPrefix = "rath.toolrunner."

// headerWaiting marks a hand-over's answer whose error is a wait
// (consume.Waiting), so that the forwarding runner waits too.
const headerWaiting = "Rath-Waiting"

// headerPing marks a forwarder's question whether the holder still serves
// its subject; handoverPing is how often it asks while a call runs there.
const (
	headerPing   = "Rath-Ping"
	handoverPing = 2 * time.Second
)

// gone reports whether nobody serves subject any more.
func (r *Runner) gone(ctx context.Context, subject string) bool {
	m := nats.NewMsg(subject)
	m.Header.Set(headerPing, "1")
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := r.c.Conn().RequestMsgWithContext(pctx, m)
	return errors.Is(err, nats.ErrNoResponders)
}

// handoverWait bounds a handed-over call: a tool may run for minutes.
const handoverWait = 35 * time.Minute

// elsewhere reports that another runner holds the session's workspace.
type elsewhere struct{ host, root string }

func (e *elsewhere) Error() string {
	return fmt.Sprintf("the session's workspace is on %s:%s", e.host, e.root)
}

func handoverSubject(host, root string) string {
	sum := sha256.Sum256([]byte(host + "\x00" + root))
	return handoverPrefix + hex.EncodeToString(sum[:8])
}

func fnvHash(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// forward hands a call to the runner holding the session's workspace and
// waits for it to be done there.
//
// A request's reply never comes from a holder that dies once it has the
// request (no "no responders" then): while it waits, the forwarder asks
// the holder's subject whether anyone still serves it, and a holder gone
// makes the call fail here, to be delivered again and taken over.
func (r *Runner) forward(ctx context.Context, ev events.Stored, away *elsewhere) error {
	ctx, cancel := context.WithTimeout(ctx, handoverWait)
	defer cancel()
	subject := handoverSubject(away.host, away.root)
	type answer struct {
		reply *nats.Msg
		err   error
	}
	answered := make(chan answer, 1)
	go func() {
		reply, err := r.c.Conn().RequestWithContext(ctx, subject, ev.Raw)
		answered <- answer{reply, err}
	}()
	tick := time.NewTicker(handoverPing)
	defer tick.Stop()
	var a answer
	for waiting := true; waiting; {
		select {
		case a = <-answered:
			waiting = false
		case <-tick.C:
			if r.gone(ctx, subject) {
				cancel()
				<-answered
				return fmt.Errorf("the runner %s:%s holding the session went away while it had %s: delivered again, the call is taken over", away.host, away.root, ev.ID)
			}
		}
	}
	reply, err := a.reply, a.err
	if errors.Is(err, nats.ErrNoResponders) {
		return r.handle(ctx, ev, true)
	}
	if err != nil {
		return fmt.Errorf("hand %s over to %s:%s: %w", ev.ID, away.host, away.root, err)
	}
	if len(reply.Data) > 0 {
		err := fmt.Errorf("handed over to %s:%s: %s", away.host, away.root, reply.Data)
		if reply.Header.Get(headerWaiting) != "" {
			return consume.Waiting(err)
		}
		return err
	}
	return nil
}

// ServeHandovers answers calls and moves handed over by other runners until
// ctx ends: on one subject per backend, named after the backend's host and
// root, since a placement's directory names the root that holds it.
func (r *Runner) ServeHandovers(ctx context.Context) error {
	var subs []*nats.Subscription
	for _, b := range r.backends.all() {
		host, root := b.Location()
		sub, err := r.c.Conn().Subscribe(handoverSubject(host, root), func(m *nats.Msg) {
			if m.Header.Get(headerPing) != "" {
				_ = m.Respond(nil) // still here
				return
			}
			go func() {
				ev, err := events.ParseStored(m.Data)
				if err == nil {
					err = r.Handle(context.WithoutCancel(ctx), ev)
				}
				out := nats.NewMsg(m.Reply)
				if err != nil {
					out.Data = []byte(err.Error())
					if consume.IsWaiting(err) {
						// The call waits (for a move): so does its forwarder.
						out.Header.Set(headerWaiting, "true")
					}
				}
				_ = m.RespondMsg(out)
			}()
		})
		if err != nil {
			for _, s := range subs {
				_ = s.Unsubscribe()
			}
			return fmt.Errorf("serve hand-overs of %s: %w", root, err)
		}
		subs = append(subs, sub)
	}
	<-ctx.Done()
	var errs []error
	for _, s := range subs {
		errs = append(errs, s.Drain())
	}
	return errors.Join(errs...)
}
