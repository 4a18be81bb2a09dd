package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/session-ledger/internal/ledger"
)

// rig is a ledger serving on a real embedded JetStream, and a client.
type rig struct {
	nc    *nats.Conn
	c     *client.Client
	store *eventstore.Store
	l     *ledger.Ledger
	// stop stops the ledger and waits for it (also done when the test ends).
	stop func()
}

const testK = 4 // small snapshot interval so tests cross snapshots

// testKey is the signing key of every ledger of the tests: ledgers of one
// deployment share it (or trust each other's).
var testKey = func() *events.SigningKey {
	k, err := events.GenerateSigningKey()
	if err != nil {
		panic(err)
	}
	return k
}()

func newRig(t *testing.T) *rig {
	t.Helper()
	_, nc := natstest.Start(t)
	return serveOn(t, nc, "ledger-a")
}

func serveOn(t *testing.T, nc *nats.Conn, name string) *rig {
	t.Helper()
	return serveWith(t, nc, name, nil)
}

// serveWith is serveOn with the ledger's configuration changed by edit.
func serveWith(t *testing.T, nc *nats.Conn, name string, edit func(*ledger.Config)) *rig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	store, err := eventstore.Open(ctx, nc, eventstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := ledger.DefaultConfig()
	cfg.SnapshotEvery, cfg.Name, cfg.Key = testK, name, testKey
	if edit != nil {
		edit(&cfg)
	}
	l, err := ledger.New(store, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Serve(ctx, nc) }()
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	t.Cleanup(stop)
	c, err := client.New(nc, client.WithRetryFor(0))
	if err != nil {
		t.Fatal(err)
	}
	// Serve subscribes asynchronously, each operation in turn: wait until it
	// answers them all (one answering, such as list, does not say append
	// does: "no responders" to a first start, seen under load).
	select {
	case <-l.Ready():
	case err := <-done:
		done <- err // for stop
		t.Fatalf("serve ended before it was ready: %v", err)
	}
	return &rig{nc: nc, c: c, store: store, l: l, stop: stop}
}

func (r *rig) start(t *testing.T, id string) api.Ack {
	t.Helper()
	a, err := r.c.Start(context.Background(), id, events.SessionStarted{Task: "test " + id, Workflow: "wf"})
	if err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	return a
}

func (r *rig) emit(t *testing.T, id string, data any, opts ...events.Option) api.Ack {
	t.Helper()
	a, err := r.c.Emit(context.Background(), id, data, opts...)
	if err != nil {
		t.Fatalf("emit %T to %s: %v", data, id, err)
	}
	return a
}

func chunk(text string) *events.ChunkAppended {
	return &events.ChunkAppended{Role: events.RoleAssistant, Agent: "coder", Content: text}
}

func usage(in, out int64) *events.ModelCalled {
	return &events.ModelCalled{Agent: "coder", Provider: "scripted", Model: "m1", TokensIn: in, TokensOut: out, LatencyMS: 1}
}

func wantCode(t *testing.T, err error, code api.Code) {
	t.Helper()
	var le *api.Error
	if !errors.As(err, &le) {
		t.Fatalf("want error %s, got %v", code, err)
	}
	if le.Code != code {
		t.Fatalf("want error %s, got %s: %s", code, le.Code, le.Message)
	}
}

func (r *rig) verifyOK(t *testing.T, id string) api.Report {
	t.Helper()
	rep, err := r.c.Verify(context.Background(), id)
	if err != nil {
		t.Fatalf("verify %s: %v", id, err)
	}
	if !rep.OK {
		t.Fatalf("verify %s: %+v", id, rep.Fault)
	}
	return rep
}

func (r *rig) rejections(t *testing.T, id string) []eventstore.Rejection {
	t.Helper()
	var out []eventstore.Rejection
	if err := r.c.Rejections(context.Background(), id, func(rj eventstore.Rejection) error {
		out = append(out, rj)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

var errDone = errors.New("done")

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// waitABit blocks for one round trip to the server: a bounded poll step that
// lets the ledger make progress without sleeping a guessed duration.
func waitABit(r *rig) { _ = r.nc.Flush() }

func forkAt(parent string, at uint64, id string) api.ForkRequest {
	return api.ForkRequest{Parent: parent, At: at, ID: id}
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
