package reqrep_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/reqrep"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
)

// A server on the ledger's subjects answers each kind of result in the one
// error model, names the asker from the subject, refuses a reply above the
// message limit instead of losing it, and on Stop answers the request in
// hand before it returns.
func TestServer(t *testing.T) {
	ns, _ := natstest.Start(t)
	serverConn := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleLedger)
	release := make(chan struct{})
	started := make(chan struct{})
	handlers := map[string]reqrep.Handler{
		"who": func(ctx context.Context, _ *nats.Msg) (any, error) {
			p, _ := events.PrincipalFrom(ctx)
			return map[string]string{"asker": p.String()}, nil
		},
		"raw": func(context.Context, *nats.Msg) (any, error) { return []byte(`{"a":"<b>"}`), nil },
		"refused": func(context.Context, *nats.Msg) (any, error) {
			return nil, api.Errorf(api.CodeNotFound, "no such thing")
		},
		"wrapped": func(context.Context, *nats.Msg) (any, error) {
			return nil, fmt.Errorf("reading x: %w", api.Errorf(api.CodeNotFound, "no such thing"))
		},
		"broken": func(context.Context, *nats.Msg) (any, error) { return nil, errors.New("disk on fire") },
		"huge":   func(context.Context, *nats.Msg) (any, error) { return strings.Repeat("x", 9<<20), nil },
		"slow": func(context.Context, *nats.Msg) (any, error) {
			close(started)
			<-release
			return "done", nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := reqrep.Start(ctx, serverConn, reqrep.Config{Prefix: events.LedgerPrefix, Queue: "q", Inflight: 4, Timeout: 30 * time.Second, TooLarge: "ask for less", Log: slog.New(slog.DiscardHandler)}, handlers)
	if err != nil {
		t.Fatal(err)
	}
	nc := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleClient)
	ask := func(op string) *nats.Msg {
		t.Helper()
		// Generous: "huge" encodes 9 MiB under -race on a busy machine.
		m, err := nc.Request(events.DefaultClient.Ledger(op), []byte(`{}`), 30*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		return m
	}
	if m := ask("who"); string(m.Data) != `{"asker":"default/client"}` || m.Header.Get(api.HeaderError) != "" {
		t.Errorf("who: %s %v", m.Data, m.Header)
	}
	if m := ask("raw"); string(m.Data) != `{"a":"<b>"}` {
		t.Errorf("raw: %s", m.Data)
	}
	for op, want := range map[string]string{
		"refused": `{"error":{"code":"session_not_found","message":"no such thing"}}`,
		"wrapped": `{"error":{"code":"session_not_found","message":"reading x: no such thing"}}`,
		"broken":  `{"error":{"code":"unavailable","message":"disk on fire"}}`,
	} {
		m := ask(op)
		if string(m.Data) != want || m.Header.Get(api.HeaderError) == "" {
			t.Errorf("%s: %s (header %q), want %s", op, m.Data, m.Header.Get(api.HeaderError), want)
		}
	}
	if m := ask("huge"); m.Header.Get(api.HeaderError) != string(api.CodeTooLarge) || !strings.Contains(string(m.Data), "ask for less") {
		t.Errorf("huge: %s", m.Data)
	}

	answered := make(chan *nats.Msg, 1)
	go func() {
		m, err := nc.Request(events.DefaultClient.Ledger("slow"), nil, 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		answered <- m
	}()
	<-started
	stopped := make(chan struct{})
	go func() { srv.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned with a request in hand")
	default:
	}
	close(release)
	<-stopped
	if m := <-answered; m == nil || string(m.Data) != `"done"` {
		t.Fatalf("the request in hand at Stop: %v", m)
	}
}

// At most Inflight requests are handled at once, whichever goroutines
// handle them, and every request queued beyond that is answered.
func TestServerBoundsRequestsInHand(t *testing.T) {
	ns, _ := natstest.Start(t)
	serverConn := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleLedger)
	const inflight, asked = 2, 12
	var now, most atomic.Int64
	full := make(chan struct{})
	var fullOnce sync.Once
	handlers := map[string]reqrep.Handler{
		"work": func(context.Context, *nats.Msg) (any, error) {
			n := now.Add(1)
			defer now.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			if n == inflight {
				fullOnce.Do(func() { close(full) })
			}
			<-full // the first ones wait until the bound is reached
			return "ok", nil
		},
	}
	srv, err := reqrep.Start(context.Background(), serverConn, reqrep.Config{Prefix: events.LedgerPrefix, Queue: "q", Inflight: inflight, Timeout: 30 * time.Second, Log: slog.New(slog.DiscardHandler)}, handlers)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	nc := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleClient)
	var wg sync.WaitGroup
	for range asked {
		wg.Go(func() {
			m, err := nc.Request(events.DefaultClient.Ledger("work"), nil, 30*time.Second)
			if err != nil || string(m.Data) != `"ok"` {
				t.Errorf("request: %v %v", m, err)
			}
		})
	}
	wg.Wait()
	if got := most.Load(); got != inflight {
		t.Errorf("at most %d requests in hand at once, want %d", got, inflight)
	}
}
