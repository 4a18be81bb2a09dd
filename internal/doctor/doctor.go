// Package doctor checks a NATS deployment for what Rath needs of it: the
// server's version and JetStream, the streams and buckets the ledger creates
// (replicas, retention, limits, dedupe window), the services' durable
// consumers and their backlog, the connection's identity and what it may do,
// and the clock. Each finding says what is wrong and how to fix it; `rath
// doctor` prints them.
package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/memoryapi"
	"github.com/openrath/rath/pkg/session"
)

// Level is how bad a finding is.
type Level int

const (
	OK   Level = iota // as Rath needs it
	Info              // worth knowing, nothing to fix
	Warn              // works, but not as it should run
	Fail              // Rath does not work (or loses guarantees) like this
)

func (l Level) String() string {
	switch l {
	case OK:
		return "ok"
	case Info:
		return "info"
	case Warn:
		return "warn"
	}
	return "FAIL"
}

// MarshalText writes the level as String does (for JSON output).
func (l Level) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// Finding is one check's result.
type Finding struct {
	Check  string `json:"check"`
	Level  Level  `json:"level"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Options tunes the checks.
type Options struct {
	// MinVersion is the oldest nats-server Rath supports (atomic batches:
	// 2.12; default "2.12.0").
	MinVersion string
	// MaxSkew is the clock difference to the server beyond which a finding
	// warns (default 2 s: event times are the ledger's, dedupe windows and
	// head intervals the server's).
	MaxSkew time.Duration
	// MaxPending is the consumer backlog beyond which a finding warns
	// (default 10,000 events).
	MaxPending uint64
	// Now is the local clock (default time.Now).
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.MinVersion == "" {
		o.MinVersion = "2.12.0"
	}
	if o.MaxSkew == 0 {
		o.MaxSkew = 2 * time.Second
	}
	if o.MaxPending == 0 {
		o.MaxPending = 10_000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Failed reports whether any finding is a failure.
func Failed(fs []Finding) bool {
	return slices.ContainsFunc(fs, func(f Finding) bool { return f.Level == Fail })
}

// report collects findings.
type report []Finding

func (r *report) add(check string, l Level, fix string, format string, args ...any) {
	*r = append(*r, Finding{Check: check, Level: l, Detail: fmt.Sprintf(format, args...), Fix: fix})
}

// Run checks the deployment nc is connected to. It fails only when it cannot
// check at all (ctx ended); what it cannot see with the connection's
// permissions is a finding.
func Run(ctx context.Context, nc *nats.Conn, opts Options) ([]Finding, error) {
	opts.defaults()
	var r report
	checkServer(&r, nc, opts)
	who, mayUseJS := checkIdentity(ctx, &r, nc)
	if !mayUseJS {
		r.add("jetstream", Warn, "run doctor with admin credentials (--creds <data>/creds/admin.nk)", "%s may not use the JetStream API (a client reads through the ledger): streams, buckets, consumers and the clock not checked", who)
		return r, nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("doctor: %w", err)
	}
	acct, err := js.AccountInfo(ctx)
	switch {
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		r.add("jetstream", Fail, "start nats-server with JetStream (-js, or a jetstream {} block with store_dir) and give the account JetStream limits", "JetStream is not enabled for this account: %v", err)
		return r, nil
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("doctor: %w", ctx.Err())
	case err != nil:
		r.add("jetstream", Warn, "run doctor with admin credentials (admin.nk) to see the account's JetStream limits", "cannot read the account's JetStream information with %s: %v", who, err)
	default:
		r.add("jetstream", OK, "", "JetStream enabled: %d streams, %d consumers, %s stored (domain %q)", acct.Streams, acct.Consumers, bytes(acct.Store), acct.Domain)
	}
	checkStreams(ctx, &r, js, who, opts)
	checkConsumers(ctx, &r, js, who, opts)
	checkWaiting(ctx, &r, nc)
	return r, nil
}

// maxWaitingChecked bounds the active sessions checkWaiting reads, the
// most recently active first: one state request each.
const maxWaitingChecked = 200

// checkWaiting names the active sessions that wait for a tool nobody
// offers: a turn that recorded its wait (pending work of kind
// session.WorkKindTool). Such a session looks healthy otherwise until its
// turn gives up, minutes later.
func checkWaiting(ctx context.Context, r *report, nc *nats.Conn) {
	c, err := client.New(nc, client.As(events.Service("admin")), client.WithRetryFor(0))
	if err != nil {
		r.add("sessions", Warn, "", "active sessions not read: %v", err)
		return
	}
	active, err := c.List(ctx, api.ListRequest{Status: string(session.StatusActive), Order: "active", Limit: maxWaitingChecked})
	if err != nil {
		r.add("sessions", Warn, "is the ledger running? (rath up, or the session-ledger service)", "active sessions not read: %v", err)
		return
	}
	var waiting []string
	for _, s := range active {
		st, err := c.State(ctx, s.ID)
		if err != nil {
			r.add("sessions", Warn, "", "session %s not read: %v", s.ID, err)
			continue
		}
		for _, id := range slices.Sorted(maps.Keys(st.Pending)) {
			if w := st.Pending[id]; w.Kind == session.WorkKindTool {
				waiting = append(waiting, fmt.Sprintf("%s (since %d: %s)", s.ID, w.Seq, w.Description))
			}
		}
	}
	if len(waiting) == 0 {
		r.add("sessions", OK, "", "%d active sessions read (at most %d, the most recently active): none waits for a tool nobody offers", len(active), maxWaitingChecked)
		return
	}
	r.add("sessions", Warn, "start the server that offers the tool (docs/tools.md), or close the session (rath close SESSION); its turn gives up after five waits",
		"%d of %d active sessions wait for a tool nobody offers: %s", len(waiting), len(active), strings.Join(waiting, "; "))
}

// checkServer: version, max payload.
func checkServer(r *report, nc *nats.Conn, opts Options) {
	v := nc.ConnectedServerVersion()
	switch ok, err := atLeast(v, opts.MinVersion); {
	case err != nil:
		r.add("server version", Warn, "", "cannot read the server version %q: %v", v, err)
	case !ok:
		r.add("server version", Fail, "upgrade nats-server to "+opts.MinVersion+" or later (Rath stores a model's answer as a JetStream atomic batch)", "nats-server %s at %s is older than %s", v, nc.ConnectedUrlRedacted(), opts.MinVersion)
	default:
		r.add("server version", OK, "", "nats-server %s at %s (cluster %q)", v, nc.ConnectedUrlRedacted(), nc.ConnectedClusterName())
	}
	const want = 8 << 20
	if mp := nc.MaxPayload(); mp < want {
		r.add("max payload", Fail, "set max_payload: 8MB in the server configuration (operations.md, \"Running your own NATS\")", "the server's max_payload is %s; snapshots of long sessions need up to 8 MiB", bytes(uint64(mp)))
	} else {
		r.add("max payload", OK, "", "max_payload %s", bytes(uint64(mp)))
	}
}

// userInfo is the server's answer to $SYS.REQ.USER.INFO: who this
// connection is and what it may do.
type userInfo struct {
	Data struct {
		User        string `json:"user"`
		Account     string `json:"account"`
		Permissions *struct {
			Publish *struct {
				Allow []string `json:"allow"`
				Deny  []string `json:"deny"`
			} `json:"publish"`
			Subscribe *struct {
				Allow []string `json:"allow"`
			} `json:"subscribe"`
		} `json:"permissions"`
	} `json:"data"`
	Error *struct {
		Description string `json:"description"`
	} `json:"error"`
}

// checkIdentity reports who the connection is and which of Rath's roles
// its permissions match; it returns a name for it in other findings and
// whether it may ask the JetStream API (true when unknown).
func checkIdentity(ctx context.Context, r *report, nc *nats.Conn) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	msg, err := nc.RequestWithContext(ctx, "$SYS.REQ.USER.INFO", nil)
	var ui userInfo
	if err == nil {
		err = json.Unmarshal(msg.Data, &ui)
	}
	if err == nil && ui.Error != nil {
		err = errors.New(ui.Error.Description)
	}
	if err != nil {
		r.add("identity", Warn, "", "the server does not say who this connection is ($SYS.REQ.USER.INFO: %v)", err)
		return "this identity", true
	}
	who := ui.Data.User
	if who == "" {
		r.add("identity", Fail, "give every connection credentials: `rath up` writes one file per role under <data>/creds (security.md)", "this connection is anonymous (account %s): Rath's deployments authenticate every connection", ui.Data.Account)
		return "an anonymous connection", true
	}
	role, exact := matchRole(ui)
	switch {
	case role == "":
		r.add("identity", Info, "", "user %s (account %s) has permissions that match none of Rath's roles", short(who), ui.Data.Account)
	case exact:
		r.add("identity", OK, "", "user %s (account %s): the %s role's permissions exactly", short(who), ui.Data.Account, role)
	default:
		r.add("identity", Warn, "mint this identity's permissions from the role (deploy/nats-server.conf is generated from internal/auth)", "user %s (account %s) may publish what the %s role may, and differs from it elsewhere", short(who), ui.Data.Account, role)
	}
	p := ui.Data.Permissions
	js := p == nil || p.Publish == nil || slices.ContainsFunc(p.Publish.Allow, func(s string) bool { return matches(s, "$JS.API.INFO") })
	return "user " + short(who), js
}

// matches reports whether a NATS subject pattern (with * and >) matches a
// literal subject.
func matches(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		switch {
		case tok == ">":
			return i < len(s)
		case i >= len(s):
			return false
		case tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(p) == len(s)
}

// matchRole finds the role whose publish allow list the user's equals (or
// contains); exact when allow and deny lists are the role's.
func matchRole(ui userInfo) (auth.Role, bool) {
	p := ui.Data.Permissions
	if p == nil || p.Publish == nil {
		return auth.RoleAdmin, false // no permissions: may do anything
	}
	for _, role := range auth.Roles() {
		want := role.Permissions()
		if sameSet(want.Publish.Allow, p.Publish.Allow) {
			return role, sameSet(want.Publish.Deny, p.Publish.Deny)
		}
	}
	return "", false
}

func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// streamWant is what Rath needs of one stream.
type streamWant struct {
	name      string
	forever   bool // limits retention with no age, count or size limit
	workQueue bool
	atomic    bool // AllowAtomicPublish
	schedules bool // AllowMsgSchedules (durable timers)
	republish bool
	// memory: created by the memory service, not the ledger (missing: the
	// memory service has not started).
	memory bool
}

var wantStreams = []streamWant{
	{name: events.StreamSessions, forever: true, atomic: true, republish: true},
	{name: events.StreamSigs, forever: true},
	{name: events.StreamInbox, workQueue: true},
	{name: events.StreamTimers, workQueue: true, schedules: true},
	{name: events.StreamRejects},
	{name: events.StreamDead},
	{name: memoryapi.Stream, forever: true, memory: true},
	{name: "KV_" + events.BucketSnapshots},
	{name: "KV_" + events.BucketSessions},
	{name: "KV_" + events.BucketTools},
	{name: "KV_" + events.BucketHeads},
	{name: "OBJ_" + events.BucketBlobs},
}

// checkStreams checks each stream and bucket, and their replicas against
// each other and the cluster.
func checkStreams(ctx context.Context, r *report, js jetstream.JetStream, who string, opts Options) {
	replicas := map[int][]string{}
	clusterSize := 0
	for _, w := range wantStreams {
		st, err := js.Stream(ctx, w.name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound) && w.memory:
			r.add("stream "+w.name, Warn, "start the memory service (rath up runs it; memory-svc --nats URL): it creates "+w.name, "%s does not exist: no memory service has started", w.name)
			continue
		case errors.Is(err, jetstream.ErrStreamNotFound):
			r.add("stream "+w.name, Fail, "start a ledger against this server (rath up, or session-ledger --nats URL): it creates the streams", "%s does not exist", w.name)
			continue
		case err != nil:
			r.add("stream "+w.name, Warn, "run doctor with admin credentials (admin.nk)", "cannot read %s with %s: %v", w.name, who, err)
			continue
		}
		info := st.CachedInfo()
		cfg := info.Config
		replicas[cfg.Replicas] = append(replicas[cfg.Replicas], w.name)
		if w.name == events.StreamSessions {
			checkClock(r, info.TimeStamp, opts)
			if info.Cluster != nil {
				clusterSize = 1 + len(info.Cluster.Replicas)
			}
		}
		var bad []string
		if w.forever && (cfg.MaxAge != 0 || cfg.MaxMsgs > 0 || cfg.MaxBytes > 0 || cfg.MaxMsgsPerSubject > 0) {
			bad = append(bad, fmt.Sprintf("it has limits (max age %s, max msgs %d, max bytes %d, per subject %d) that delete evidence", cfg.MaxAge, cfg.MaxMsgs, cfg.MaxBytes, cfg.MaxMsgsPerSubject))
		}
		if w.forever && cfg.Retention != jetstream.LimitsPolicy {
			bad = append(bad, fmt.Sprintf("retention is %s, not limits", cfg.Retention))
		}
		if w.workQueue && cfg.Retention != jetstream.WorkQueuePolicy {
			bad = append(bad, fmt.Sprintf("retention is %s, not work queue", cfg.Retention))
		}
		if w.atomic && !cfg.AllowAtomicPublish {
			bad = append(bad, "atomic publish is not allowed")
		}
		if w.schedules && !cfg.AllowMsgSchedules {
			bad = append(bad, "message schedules are not allowed (durable timers never fire)")
		}
		if w.republish && cfg.RePublish == nil {
			bad = append(bad, "it does not republish to the live subjects")
		}
		if cfg.Storage != jetstream.FileStorage {
			bad = append(bad, "it is not file-backed")
		}
		if strings.HasPrefix(w.name, "RATH_") && cfg.Duplicates < 2*time.Minute {
			bad = append(bad, fmt.Sprintf("its dedupe window is %s (the ledger needs more than 2 minutes to recognise a retried append)", cfg.Duplicates))
		}
		if len(bad) > 0 {
			r.add("stream "+w.name, Fail, "restart the ledger: it updates the streams it owns at start (eventstore.Open); edit by hand only what it cannot change", "%s: %s", w.name, strings.Join(bad, "; "))
			continue
		}
		r.add("stream "+w.name, OK, "", "%d messages, %s, R%d, dedupe window %s", info.State.Msgs, bytes(info.State.Bytes), cfg.Replicas, cfg.Duplicates)
	}
	if len(replicas) > 1 {
		var parts []string
		for _, n := range slices.Sorted(func(yield func(int) bool) {
			for n := range replicas {
				if !yield(n) {
					return
				}
			}
		}) {
			parts = append(parts, fmt.Sprintf("R%d: %s", n, strings.Join(replicas[n], ", ")))
		}
		r.add("replicas", Warn, "start every ledger with the same --replicas; it updates the streams it owns", "the streams are replicated unevenly (%s)", strings.Join(parts, "; "))
	} else if clusterSize > 0 {
		for n := range replicas {
			if n > clusterSize {
				r.add("replicas", Fail, "add servers to the cluster or lower --replicas", "the streams want %d replicas, the cluster has %d servers", n, clusterSize)
			}
		}
	}
}

// checkClock compares the server's clock (the time it stamped an API reply
// with) with the local one.
func checkClock(r *report, serverTime time.Time, opts Options) {
	if serverTime.IsZero() {
		r.add("clock", Info, "", "the server does not stamp its replies with its time: clock skew not checked")
		return
	}
	skew := opts.Now().Sub(serverTime)
	if skew < 0 {
		skew = -skew
	}
	if skew > opts.MaxSkew {
		r.add("clock", Warn, "run NTP (chrony, systemd-timesyncd) on this host and the servers", "this host's clock differs from the server's by %s (more than %s): events carry the ledger's times, heads and dedupe windows the server's", skew.Round(time.Millisecond), opts.MaxSkew)
		return
	}
	r.add("clock", OK, "", "this host's clock is within %s of the server's", skew.Round(time.Millisecond))
}

// checkConsumers reports the services' durable consumers and their backlog.
func checkConsumers(ctx context.Context, r *report, js jetstream.JetStream, who string, opts Options) {
	type owned struct {
		name string
		role auth.Role
	}
	var want []owned
	for _, role := range auth.Roles() {
		for _, d := range auth.Durables(role) {
			want = append(want, owned{d, role})
		}
	}
	for _, c := range want {
		cons, err := js.Consumer(ctx, events.StreamSessions, c.name)
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound):
			r.add("consumer "+c.name, Info, "start the "+string(c.role)+" service if this deployment should run it", "%s has not started yet (no durable consumer %s)", c.role, c.name)
			continue
		case errors.Is(err, jetstream.ErrStreamNotFound):
			return // reported with the streams
		case err != nil:
			r.add("consumer "+c.name, Warn, "run doctor with admin credentials (admin.nk)", "cannot read consumer %s with %s: %v", c.name, who, err)
			continue
		}
		info := cons.CachedInfo()
		l, fix := OK, ""
		if info.NumPending > opts.MaxPending {
			l, fix = Warn, "run more "+string(c.role)+" processes (they share the consumer) or find why it is slow (its logs, rath dead letters)"
		}
		r.add("consumer "+c.name, l, fix, "%d pending, %d awaiting ack, %d redelivered", info.NumPending, info.NumAckPending, info.NumRedelivered)
	}
	if _, err := js.Consumer(ctx, events.StreamInbox, events.InboxConsumer); err == nil {
		r.add("consumer "+events.InboxConsumer, OK, "", "exists (the ledgers share it on %s)", events.StreamInbox)
	}
}

// atLeast compares dotted versions (a "-suffix" is ignored).
func atLeast(v, min string) (bool, error) {
	parse := func(s string) ([3]int, error) {
		var out [3]int
		s, _, _ = strings.Cut(strings.TrimPrefix(s, "v"), "-")
		for i, p := range strings.SplitN(s, ".", 3) {
			n, err := strconv.Atoi(p)
			if err != nil {
				return out, fmt.Errorf("version %q: %w", s, err)
			}
			out[i] = n
		}
		return out, nil
	}
	a, err := parse(v)
	if err != nil {
		return false, err
	}
	b, err := parse(min)
	if err != nil {
		return false, err
	}
	for i := range a {
		if a[i] != b[i] {
			return a[i] > b[i], nil
		}
	}
	return true, nil
}

func bytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// short cuts an nkey public key for display.
func short(user string) string {
	if len(user) > 16 {
		return user[:12] + "…"
	}
	return user
}
