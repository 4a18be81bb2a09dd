package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
)

// The JetStream floor of 5a‴: the message pattern of one 5a session replayed
// on raw JetStream, in this process, on a stream of its own (file storage,
// R1, atomic publish and direct gets allowed, the raw stream's dedupe
// window), on subjects benchfloor.<session>.<kind>.
const (
	floorStream   = "BENCH_FLOOR"
	floorPrefix   = "benchfloor"
	floorWait     = 10 * time.Second
	headerBatchID = "Nats-Batch-Id"
	// internal/consume's pull expiry and heartbeat.
	floorPullExpiry    = 10 * time.Second
	floorPullHeartbeat = 2 * time.Second
)

// floorMsg is one stored event of the replayed session: its kind (the
// subject's last token), its type and its stored body.
type floorMsg struct {
	token, typ string
	body       []byte
}

// floorPattern is a session's events as the ledger appended them: each unit
// is one append, a single event or one atomic batch.
type floorPattern struct {
	units  [][]floorMsg
	events int
}

// shape counts the pattern's single appends and its atomic batches' sizes.
func (p floorPattern) shape() (singles int, batches []int) {
	for _, u := range p.units {
		if len(u) == 1 {
			singles++
		} else {
			batches = append(batches, len(u))
		}
	}
	return singles, batches
}

// readFloorPattern reads one session's stored events and groups those the
// ledger stored as one atomic batch (the stored messages keep the batch's
// Nats-Batch-Id header).
func (h *harness) readFloorPattern(ctx context.Context, id string) (floorPattern, error) {
	var p floorPattern
	last := ""
	err := h.store.ScanSession(ctx, id, 0, 0, func(m eventstore.Msg) error {
		ev, err := events.ParseStored(m.Body)
		if err != nil {
			return err
		}
		fm := floorMsg{token: m.Subject[strings.LastIndexByte(m.Subject, '.')+1:], typ: ev.Type, body: m.Body}
		b := m.Header.Get(headerBatchID)
		if b != "" && b == last {
			p.units[len(p.units)-1] = append(p.units[len(p.units)-1], fm)
		} else {
			p.units = append(p.units, []floorMsg{fm})
		}
		last = b
		p.events++
		return nil
	})
	if err != nil {
		return p, fmt.Errorf("read session %s: %w", id, err)
	}
	if p.events == 0 {
		return p, fmt.Errorf("session %s: no events stored", id)
	}
	return p, nil
}

// floorHandles is what each of Rath's durable consumers on the sessions
// stream handles (and acks with DoubleAck once handled); it acks the other
// events it receives with a plain Ack (internal/consume). nil: every event.
// The services' constants are in internal packages the harness cannot
// import.
var floorHandles = map[string][]string{
	"selector":     nil,
	"agent-worker": {events.TypeTurnRequested},
	"tool-runner": {events.TypeToolRequested, events.TypeSandboxRequested, events.TypeApprovalGranted,
		events.TypeApprovalRejected, events.TypeApprovalExpired},
	"mcp-servers": {events.TypeSessionStarted, events.TypeSessionClosed},
}

// floorConsumer is one of Rath's durable consumers, copied onto the floor's
// stream: the same name, kinds, ack wait and ack window.
type floorConsumer struct {
	name    string
	tokens  []string // nil: every kind
	handles map[string]bool
	all     bool // handles every type
	ackWait time.Duration
	pending int

	nc      *nats.Conn
	cc      jetstream.ConsumeContext
	got     chan error
	double  int // acks with DoubleAck
	plain   int // plain acks
	deliver int
}

func (c *floorConsumer) matches(token string) bool {
	return c.tokens == nil || slices.Contains(c.tokens, token)
}

func (c *floorConsumer) describe() string {
	kinds := "every kind"
	if c.tokens != nil {
		kinds = strings.Join(c.tokens, "+")
	}
	return fmt.Sprintf("%s (%s)", c.name, kinds)
}

// floorConsumers reads the durable consumers Rath's services have on the
// sessions stream now (5a's, in this process), to copy them.
func (h *harness) floorConsumers(ctx context.Context) ([]*floorConsumer, error) {
	var out []*floorConsumer
	l := h.stream.ListConsumers(ctx)
	for info := range l.Info() {
		cfg := info.Config
		if cfg.Durable == "" || cfg.DeliverSubject != "" || cfg.AckPolicy != jetstream.AckExplicitPolicy {
			continue
		}
		c := &floorConsumer{name: cfg.Durable, ackWait: cfg.AckWait, pending: cfg.MaxAckPending}
		filters := cfg.FilterSubjects
		if cfg.FilterSubject != "" {
			filters = append(filters, cfg.FilterSubject)
		}
		for _, f := range filters {
			t := f[strings.LastIndexByte(f, '.')+1:]
			if t == ">" || t == "*" {
				c.tokens = nil
				break
			}
			c.tokens = append(c.tokens, t)
		}
		types, known := floorHandles[c.name]
		if !known || types == nil {
			c.all = true
		}
		if !known {
			h.rep.note("5a‴ raw: consumer %q on %s is not one the harness knows; its copy acks every event with DoubleAck", c.name, events.StreamSessions)
		}
		c.handles = map[string]bool{}
		for _, t := range types {
			c.handles[t] = true
		}
		out = append(out, c)
	}
	if err := l.Err(); err != nil {
		return nil, fmt.Errorf("list consumers of %s: %w", events.StreamSessions, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no durable consumers on %s", events.StreamSessions)
	}
	slices.SortFunc(out, func(a, b *floorConsumer) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// floorRun is the floor's stream, its consumers and its publisher.
type floorRun struct {
	pub  *nats.Conn
	js   jetstream.JetStream
	cons []*floorConsumer
}

// startFloor (re)creates the floor's stream and starts copies of the given
// consumers on it, each on an in-process connection of its own, consuming
// as internal/consume does.
func (h *harness) startFloor(ctx context.Context, tmpl []*floorConsumer) (*floorRun, error) {
	r := &floorRun{}
	var err error
	if r.pub, err = h.connect(auth.RoleAdmin, "rath-bench-floor", true); err != nil {
		return nil, err
	}
	if r.js, err = jetstream.New(r.pub); err != nil {
		r.stop()
		return nil, err
	}
	if err := r.js.DeleteStream(ctx, floorStream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		r.stop()
		return nil, fmt.Errorf("delete stream %s: %w", floorStream, err)
	}
	_, err = r.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: floorStream, Subjects: []string{floorPrefix + ".>"},
		Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy, Replicas: 1,
		Duplicates: rawDedupeWindow, AllowDirect: true, AllowAtomicPublish: true,
	})
	if err != nil {
		r.stop()
		return nil, fmt.Errorf("create stream %s: %w", floorStream, err)
	}
	for _, t := range tmpl {
		c := new(floorConsumer)
		*c = *t
		c.got = make(chan error, 1024)
		r.cons = append(r.cons, c)
		if c.nc, err = h.connect(auth.RoleAdmin, "rath-bench-floor-"+c.name, true); err != nil {
			r.stop()
			return nil, err
		}
		js, err := jetstream.New(c.nc)
		if err != nil {
			r.stop()
			return nil, err
		}
		var filters []string
		if c.tokens == nil {
			filters = []string{floorPrefix + ".>"}
		}
		for _, tok := range c.tokens {
			filters = append(filters, floorPrefix+".*."+tok)
		}
		cons, err := js.CreateOrUpdateConsumer(ctx, floorStream, jetstream.ConsumerConfig{
			Durable: c.name, FilterSubjects: filters, AckPolicy: jetstream.AckExplicitPolicy,
			AckWait: c.ackWait, MaxAckPending: c.pending,
		})
		if err != nil {
			r.stop()
			return nil, fmt.Errorf("floor consumer %s: %w", c.name, err)
		}
		c.cc, err = cons.Consume(func(m jetstream.Msg) {
			ev, err := events.ParseStored(m.Data())
			switch {
			case err != nil:
			case c.all || c.handles[ev.Type]:
				err = m.DoubleAck(ctx)
			default:
				err = m.Ack()
			}
			c.got <- err
		}, jetstream.PullMaxMessages(max(c.pending/8, 1)), jetstream.PullExpiry(floorPullExpiry), jetstream.PullHeartbeat(floorPullHeartbeat))
		if err != nil {
			r.stop()
			return nil, fmt.Errorf("floor consumer %s: %w", c.name, err)
		}
	}
	return r, nil
}

func (r *floorRun) stop() {
	for _, c := range r.cons {
		if c.cc != nil {
			c.cc.Stop()
		}
		if c.nc != nil {
			c.nc.Close()
		}
	}
	if r.pub != nil {
		r.pub.Close()
	}
}

// floorPublish stores one append as the event store does: a single message
// with its message ID, conditional on the session's last stream sequence,
// or an atomic batch whose first message is.
func floorPublish(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, msgs []*nats.Msg, filter string, last uint64) (uint64, error) {
	if len(msgs) > 1 {
		return eventstore.PublishAtomic(ctx, nc, msgs, filter, last)
	}
	m := msgs[0]
	ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: m.Subject, Data: m.Data},
		jetstream.WithMsgID(m.Header.Get(jetstream.MsgIDHeader)), jetstream.WithExpectLastSequenceForSubject(last, filter))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// floorSession stores one session's events on the floor's stream, append by
// append, each acked before the next, and after each waits until every
// consumer has received and acked the messages of it that it matches.
func (r *floorRun) floorSession(ctx context.Context, p floorPattern, session string) error {
	filter := floorPrefix + "." + session + ".>"
	var last uint64
	n := 0
	for _, u := range p.units {
		msgs := make([]*nats.Msg, len(u))
		for i, m := range u {
			n++
			msgs[i] = &nats.Msg{Subject: floorPrefix + "." + session + "." + m.token, Data: m.body,
				Header: nats.Header{jetstream.MsgIDHeader: []string{session + "/" + strconv.Itoa(n)}}}
		}
		var err error
		last, err = floorPublish(ctx, r.pub, r.js, msgs, filter, last)
		if err != nil {
			return fmt.Errorf("floor append %d of session %s: %w", n, session, err)
		}
		for _, c := range r.cons {
			for _, m := range u {
				if !c.matches(m.token) {
					continue
				}
				select {
				case err := <-c.got:
					if err != nil {
						return fmt.Errorf("floor consumer %s: %w", c.name, err)
					}
				case <-time.After(floorWait):
					return fmt.Errorf("floor consumer %s: no delivery within %s", c.name, floorWait)
				case <-ctx.Done():
					return ctx.Err()
				}
				c.deliver++
				if c.all || c.handles[m.typ] {
					c.double++
				} else {
					c.plain++
				}
			}
		}
	}
	return nil
}

// floorResult is one variant's measurement.
type floorResult struct {
	cpuPerEvent time.Duration
	session     latencies
}

// floorSessions replays the pattern as n sessions one at a time, after one
// warm-up session, and measures this process's CPU per event and each session's wall time.
func (h *harness) floorSessions(ctx context.Context, a *attempt, r *floorRun, p floorPattern, prefix string, n int) (floorResult, error) {
	// One warm-up session, not measured: the variant's first pulls and
	// connections.
	if err := r.floorSession(ctx, p, prefix+"-warm"); err != nil {
		return floorResult{}, err
	}
	for _, c := range r.cons {
		c.deliver, c.double, c.plain = 0, 0, 0
	}
	var res floorResult
	cpu := h.cpuStart()
	for _, id := range agentIDs(prefix, n) {
		t := time.Now()
		if err := r.floorSession(ctx, p, id); err != nil {
			return res, err
		}
		res.session = append(res.session, time.Since(t))
	}
	use := a.timed(cpu.stop())
	res.cpuPerEvent = (use.self + use.ledger + use.workers) / time.Duration(max(n*p.events, 1))
	return res, nil
}

// agentFloor is 5a‴'s JetStream floor: session id's pattern replayed
// on JetStream alone. rathPerEvent is 5a‴'s CPU per
// event.
func (h *harness) agentFloor(ctx context.Context, a *attempt, id string, n, try int, rathPerEvent time.Duration) ([]row, error) {
	p, err := h.readFloorPattern(ctx, id)
	if err != nil {
		return nil, err
	}
	singles, batches := p.shape()
	if len(batches) == 0 {
		h.rep.note("5a‴ raw: the stored events of %s carry no %s header: every event is replayed as a single append", id, headerBatchID)
	}
	tmpl, err := h.floorConsumers(ctx)
	if err != nil {
		return nil, err
	}
	r, err := h.startFloor(ctx, tmpl)
	if err != nil {
		return nil, err
	}
	defer r.stop()
	h.logf("5a‴ raw: %d sessions of %s's pattern on JetStream alone", n, id)
	direct, err := h.floorSessions(ctx, a, r, p, fmt.Sprintf("direct%d", try), n)
	if err != nil {
		return nil, err
	}
	// Per session, from the direct variant's counts.
	var names []string
	deliveries, doubles, plains := 0, 0, 0
	for _, c := range r.cons {
		names = append(names, c.describe())
		deliveries += c.deliver
		doubles += c.double
		plains += c.plain
	}
	deliveries, doubles, plains = deliveries/n, doubles/n, plains/n
	sizes := make([]string, len(batches))
	for i, b := range batches {
		sizes[i] = strconv.Itoa(b)
	}
	what := fmt.Sprintf("the same %d messages of one 5a session (real bodies and kinds) on JetStream alone, in this process, %d sessions one at a time: "+
		"%d conditional publishes and %d atomic batches (of %s), each acked before the next; %d pull consumers as Rath's (%s) receiving and acking what they match before the next append: "+
		"%d deliveries per session, %d DoubleAck, %d Ack",
		p.events, n, singles, len(batches), strings.Join(sizes, ", "), len(r.cons), strings.Join(names, ", "), deliveries, doubles, plains)
	rath := fmtDur(rathPerEvent) + " CPU/event (5a‴)"
	cell := func(f floorResult) string {
		return fmt.Sprintf("%s CPU/event; session p50 %s", fmtDur(f.cpuPerEvent), fmtDur(f.session.median()))
	}
	ratio := func(f floorResult) string {
		if f.cpuPerEvent <= 0 {
			return ""
		}
		return fmt.Sprintf("%.2f× the CPU per event", float64(rathPerEvent)/float64(f.cpuPerEvent))
	}
	return []row{
		{id: "5a‴ raw", what: "5a‴'s CPU per event (this process: server, ledger, services, harness) against JetStream's floor for the same messages",
			rath: rath, rawWhat: what + "; CPU per event of this process", raw: cell(direct), ratio: ratio(direct)},
	}, nil
}
