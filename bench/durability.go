package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/embedded"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/services/session-ledger/service"
)

// sectionDurability measures what an ack costs under each durability setup
// (issue 14 item 5): the same appends, one at a time and pipelined, through
// a ledger on R1 with the default sync interval, on R1 with sync always,
// and on a 3-node cluster with R3 streams; beside each, raw JetStream's
// conditional publishes on the same servers. It is not in the default
// sections (it starts servers of its own): run it with --sections
// durability.
const sectionDurability = "durability"

// durability is one setup: how many replicas, and the servers' fsync policy.
type durability struct {
	id         string
	name       string
	replicas   int
	syncAlways bool
}

var durabilities = []durability{
	{"D1", "R1, sync interval (default 2 min)", 1, false},
	{"D2", "R1, sync always", 1, true},
	{"D3", "R3 (3 nodes), sync interval (default)", 3, false},
}

// Durability section sizes: a tenth of the append section's, three setups.
func (c config) durabilitySeq() int  { return c.n(2_000, 100) }
func (c config) durabilityPipe() int { return c.n(20_000, 1_000) }

func (h *harness) runDurability(ctx context.Context) error {
	for _, d := range durabilities {
		err := h.measureQuietly(ctx, d.id, func(ctx context.Context, try int) (attempt, error) {
			return h.durabilityRun(ctx, d, try)
		})
		if err != nil {
			return fmt.Errorf("%s: %w", d.name, err)
		}
	}
	h.rep.note("D1-D3 start servers of their own (the R3 nodes in this process, on loopback): " +
		"an R1 ack means written to the OS page cache (survives kill -9, not an OS crash or power loss within the sync interval); " +
		"sync always fsyncs before the ack (survives an OS crash and power loss); " +
		"an R3 ack means a quorum of 2 of 3 nodes has it, not fsynced (survives a node's loss, not an OS crash of a quorum within the interval)")
	return nil
}

// durabilityRun starts d's servers and a ledger on them, appends one at a
// time on one session and pipelined over the sessions, then the raw
// conditional publishes of the same bodies, and stops everything.
func (h *harness) durabilityRun(ctx context.Context, d durability, try int) (attempt, error) {
	var a attempt
	dir := filepath.Join(h.dir, fmt.Sprintf("durability-%s-%d", d.id, try))
	var users []auth.Identity
	if h.creds != nil {
		users = h.creds.Identities()
	}
	servers, err := startDurabilityServers(dir, d, users)
	defer func() {
		for _, ns := range servers {
			ns.Shutdown()
			ns.WaitForShutdown()
		}
	}()
	if err != nil {
		return a, err
	}
	urls := make([]string, len(servers))
	for i, ns := range servers {
		urls[i] = ns.ClientURL()
	}
	connect := func(role auth.Role, name string) (*nats.Conn, error) {
		opts := []nats.Option{nats.Name(name), nats.MaxReconnects(-1)}
		if h.creds != nil {
			creds, _, err := auth.Options(h.creds.Path(role))
			if err != nil {
				return nil, err
			}
			opts = append(opts, creds...)
		}
		return nats.Connect(strings.Join(urls, ","), opts...)
	}

	// The ledger, as the harness runs it in this process.
	lnc, err := connect(auth.RoleLedger, "durability-ledger")
	if err != nil {
		return a, err
	}
	defer lnc.Close()
	logf, err := os.Create(filepath.Join(dir, "ledger.log"))
	if err != nil {
		return a, err
	}
	defer logf.Close()
	cfg := service.ConfigIn(dir)
	cfg.Ledger.Name = "durability-" + d.id
	cfg.Ledger.Unsigned = h.open
	cfg.Ledger.Quotas.StartsPerMinute = noStartsQuota
	cfg.Store.Replicas = d.replicas
	lctx, stopLedger := context.WithCancel(context.Background())
	ledgerDone := make(chan error, 1)
	go func() { ledgerDone <- service.Run(lctx, lnc, cfg, slog.New(slog.NewJSONHandler(logf, nil))) }()
	defer func() {
		stopLedger()
		<-ledgerDone
	}()

	cnc, err := connect(auth.RoleClient, "durability-client")
	if err != nil {
		return a, err
	}
	defer cnc.Close()
	cli, err := client.New(cnc, client.WithSource(source), client.WithTimeout(appendTimeout), client.WithRetryFor(appendRetry))
	if err != nil {
		return a, err
	}
	anc, err := connect(auth.RoleAdmin, "durability-raw")
	if err != nil {
		return a, err
	}
	defer anc.Close()
	js, err := jetstream.New(anc)
	if err != nil {
		return a, err
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: rawStream, Subjects: []string{"bench.>"}, Storage: jetstream.FileStorage,
		Duplicates: rawDedupeWindow, AllowDirect: true, Replicas: d.replicas,
	}); err != nil {
		return a, fmt.Errorf("create stream %s: %w", rawStream, err)
	}
	// The first start waits for the ledger (and, on a cluster, for its
	// streams' placement).
	first := sessionID(fmt.Sprintf("dur%s%dseq", d.id, try), 0)
	if err := waitStart(ctx, cli, first); err != nil {
		return a, err
	}

	// One at a time, one session.
	n := h.cfg.durabilitySeq()
	evs, err := h.pay.chunks(first, n)
	if err != nil {
		return a, err
	}
	h.logf("%s (%s): %d appends, one at a time", d.id, d.name, n)
	lats := make(latencies, 0, n)
	cpu := h.cpuStart()
	start := time.Now()
	for _, ev := range evs {
		t := time.Now()
		if _, err := cli.Append(ctx, ev); err != nil {
			return a, err
		}
		lats = append(lats, time.Since(t))
	}
	seq := rate{n: n, d: time.Since(start)}
	a.timed(cpu.stop())
	msgs, err := h.pay.sealedChain(rawPrefixSeq, first, n)
	if err != nil {
		return a, err
	}
	cpu = h.cpuStart()
	rawSeq, rawLats, err := rawCondSequential(ctx, js, msgs, rawPrefixSeq+"."+first+".>")
	if err != nil {
		return a, err
	}
	a.timed(cpu.stop())

	// Pipelined: every session with one append in flight.
	pn, s := h.cfg.durabilityPipe(), h.cfg.sessions
	ids := make([]string, s)
	for i := range ids {
		ids[i] = sessionID(fmt.Sprintf("dur%s%dpipe", d.id, try), i)
	}
	if err := parallel(ctx, s, 64, func(ctx context.Context, i int) error {
		_, err := cli.Start(ctx, ids[i], events.SessionStarted{Task: "bench"})
		return err
	}); err != nil {
		return a, err
	}
	per := make([][]event.Event, s)
	for i, id := range ids {
		if per[i], err = h.pay.chunks(id, share(pn, s, i)); err != nil {
			return a, err
		}
	}
	h.logf("%s (%s): %d appends over %d sessions, one in flight per session", d.id, d.name, pn, s)
	pipe, plats, use, err := h.timedParallel(ctx, s, pn, func(ctx context.Context, i int) (latencies, error) {
		own := make(latencies, 0, len(per[i]))
		for _, ev := range per[i] {
			t := time.Now()
			if _, err := cli.Append(ctx, ev); err != nil {
				return own, err
			}
			own = append(own, time.Since(t))
		}
		return own, nil
	})
	if err != nil {
		return a, err
	}
	a.timed(use)
	chains, err := h.rawChains(rawPrefixCond, ids, pn)
	if err != nil {
		return a, err
	}
	filters := make([]string, len(ids))
	for i, id := range ids {
		filters[i] = rawPrefixCond + "." + id + ".>"
	}
	cpu = h.cpuStart()
	rawPipe, err := rawCondConcurrent(ctx, js, chains, filters)
	if err != nil {
		return a, err
	}
	a.timed(cpu.stop())
	h.logf("%s: one at a time Rath %s (%s), raw %s (%s); pipelined Rath %s (%s), raw %s", d.id, seq, lats, rawSeq, rawLats, pipe, plats, rawPipe)
	a.rows = append(a.rows, row{
		id:      d.id + "a",
		what:    fmt.Sprintf("durability %s: append one at a time (1 session, %d events)", d.name, n),
		rath:    fmt.Sprintf("%s (%s)", seq, lats),
		rawWhat: "sync publish with expected-last-subject-seq + Nats-Msg-Id, same servers",
		raw:     fmt.Sprintf("%s (%s)", rawSeq, rawLats),
		ratio:   fmtRatio(speedRatio(seq, rawSeq)),
	}, row{
		id:      d.id + "b",
		what:    fmt.Sprintf("durability %s: append pipelined (%d sessions, one in flight each, %d events)", d.name, s, pn),
		rath:    fmt.Sprintf("%s (%s)", pipe, plats),
		rawWhat: fmt.Sprintf("sync publish with expected-last-subject-seq + Nats-Msg-Id, %d sessions in flight, same servers", s),
		raw:     rawPipe.String(),
		ratio:   fmtRatio(speedRatio(pipe, rawPipe)),
	})
	return a, nil
}

// waitStart starts session id, asking again until the ledger answers (it
// is starting, and on a cluster its streams are being placed).
func waitStart(ctx context.Context, cli *client.Client, id string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := cli.Start(sctx, id, events.SessionStarted{Task: "bench"})
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("start %s: the ledger did not answer: %w", id, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startDurabilityServers starts d's servers: one embedded server, or three
// cluster nodes in this process on loopback, each accepting the
// identities; on a cluster it waits until JetStream has a meta leader that
// sees every node.
func startDurabilityServers(dir string, d durability, users []auth.Identity) ([]*server.Server, error) {
	if d.replicas == 1 {
		ns, err := embedded.Start(embedded.Config{
			Listen: "127.0.0.1:0", StoreDir: filepath.Join(dir, "jetstream"),
			SyncAlways: d.syncAlways, ServerName: "rath-durability", Users: users,
		})
		if err != nil {
			return nil, err
		}
		return []*server.Server{ns}, nil
	}
	// Route ports, fixed before the nodes start so that each can name the
	// others: held open until every one is chosen (none twice), then freed.
	ports := make([]int, d.replicas)
	held := make([]net.Listener, 0, d.replicas)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		held = append(held, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	for _, l := range held {
		l.Close()
	}
	var nkeys []*server.NkeyUser
	for _, u := range users {
		nkeys = append(nkeys, &server.NkeyUser{Nkey: u.PublicKey, Permissions: embedded.Permissions(u.Permissions())})
	}
	opts := make([]*server.Options, d.replicas)
	for i := range opts {
		var routes []*url.URL
		for j, p := range ports {
			if j != i {
				routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", p)})
			}
		}
		opts[i] = &server.Options{
			ServerName: fmt.Sprintf("rath-durability-%d", i), Host: "127.0.0.1", Port: server.RANDOM_PORT,
			JetStream: true, StoreDir: filepath.Join(dir, fmt.Sprintf("n%d", i)), MaxPayload: 8 << 20,
			SyncAlways: d.syncAlways, NoSigs: true, NoLog: true, Nkeys: nkeys,
			Cluster: server.ClusterOpts{Name: "rath-durability", Host: "127.0.0.1", Port: ports[i]},
			Routes:  routes,
		}
	}
	var servers []*server.Server
	for _, o := range opts {
		ns, err := server.NewServer(o)
		if err != nil {
			return servers, err
		}
		go ns.Start()
		servers = append(servers, ns)
	}
	for _, ns := range servers {
		if !ns.ReadyForConnections(30 * time.Second) {
			return servers, errors.New("a cluster node is not accepting connections after 30 s")
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		leaders, current := 0, 0
		for _, ns := range servers {
			if ns.JetStreamIsCurrent() {
				current++
			}
			if ns.JetStreamIsLeader() && len(ns.JetStreamClusterPeers()) == len(servers) {
				leaders++
			}
		}
		if leaders == 1 && current == len(servers) {
			return servers, nil
		}
		if time.Now().After(deadline) {
			return servers, errors.New("the cluster elected no JetStream meta leader in 90 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
