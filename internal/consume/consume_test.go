package consume_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/consume"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
	ledger "github.com/openrath/rath/services/session-ledger/service"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func setup(t *testing.T) (*nats.Conn, *client.Client) {
	t.Helper()
	ns, nc := natstest.Start(t)
	testrig.Ledger(t, ns.ClientURL())
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, c
}

func run(t *testing.T, nc *nats.Conn, c *client.Client, h consume.Handler) {
	t.Helper()
	testrig.Run(t, "run", func(ctx context.Context) error { return consume.Run(ctx, nc, h, consume.RecordInSession(c), quiet) })
}

func TestHandlerSeesEachSessionInOrderAndRetries(t *testing.T) {
	nc, c := setup(t)
	ctx := context.Background()
	var (
		mu    sync.Mutex
		seen  = map[string][]uint64{}
		fails = map[string]int{}
	)
	run(t, nc, c, consume.Handler{
		Name: "test-order", Tokens: []string{events.TokenConversation}, Workers: 4,
		Handle: func(_ context.Context, ev events.Stored) error {
			mu.Lock()
			defer mu.Unlock()
			// Fail each event's first delivery once: order must survive retries.
			if fails[ev.ID] == 0 {
				fails[ev.ID]++
				return errors.New("transient")
			}
			seen[ev.Session] = append(seen[ev.Session], ev.Seq)
			if len(seen[ev.Session]) == 5 {
				_, err := c.Emit(ctx, ev.Session, &events.WorkDone{WorkID: "all-seen"})
				return err
			}
			return nil
		},
	})
	for _, id := range []string{"o1", "o2", "o3"} {
		if _, err := c.Start(ctx, id, events.SessionStarted{}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			if _, err := c.Emit(ctx, id, &events.ChunkAppended{Role: "user", Content: "x"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, id := range []string{"o1", "o2", "o3"} {
		testrig.WaitFor(t, c, id, events.TypeWorkDone)
		mu.Lock()
		got := seen[id]
		mu.Unlock()
		for i, seq := range got {
			if seq != uint64(i+2) {
				t.Fatalf("%s handled out of order: %v", id, got)
			}
		}
	}
}

func TestGivingUpDeadLettersAndRecordsInTheSession(t *testing.T) {
	nc, c := setup(t)
	ctx := context.Background()
	run(t, nc, c, consume.Handler{
		Name: "test-poison", Tokens: []string{events.TokenTool}, Types: []string{events.TypeToolRequested}, MaxAttempts: 3,
		Handle: func(context.Context, events.Stored) error { return errors.New("workspace unavailable") },
	})
	run(t, nc, c, consume.Handler{
		Name: "test-permanent", Tokens: []string{events.TokenMemory},
		Handle: func(context.Context, events.Stored) error { return consume.Permanent(errors.New("cannot parse query")) },
	})
	if _, err := c.Start(ctx, "p", events.SessionStarted{}); err != nil {
		t.Fatal(err)
	}
	req, err := c.Emit(ctx, "p", &events.ToolRequested{CallID: "c1", Tool: "run"})
	if err != nil {
		t.Fatal(err)
	}
	failed := testrig.WaitFor(t, c, "p", events.TypeHandlerFailed)
	d, _ := failed.Decode()
	hf := d.(*events.HandlerFailed)
	if hf.Handler != "test-poison" || hf.EventID != req.ID || hf.Attempts != 3 || hf.Error != "workspace unavailable" {
		t.Fatalf("handler.failed: %+v", hf)
	}
	js, _ := jetstream.New(nc)
	stream, _ := js.Stream(ctx, events.StreamDead)
	dead, err := stream.GetLastMsgForSubject(ctx, events.DeadSubject("test-poison"))
	if err != nil || dead.Header.Get("Rath-Error") != "workspace unavailable" {
		t.Fatalf("dead letter: %v %v", dead, err)
	}
	if ev, _ := events.ParseStored(dead.Data); ev.ID != req.ID {
		t.Fatalf("dead letter holds %s", ev.ID)
	}

	mem, err := c.Emit(ctx, "p", &events.MemoryRecalled{Query: "q", Items: []events.MemoryItemRef{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	errFound := errors.New("found")
	err = c.Watch(ctx2, "p", func(ev events.Stored) error {
		if ev.Type != events.TypeHandlerFailed {
			return nil
		}
		d, _ := ev.Decode()
		if f := d.(*events.HandlerFailed); f.EventID == mem.ID && f.Attempts == 1 {
			return errFound
		}
		return nil
	}, client.From(failed.Seq+1))
	if !errors.Is(err, errFound) {
		t.Fatalf("permanent failure not recorded after one attempt: %v", err)
	}
}

// A handler waiting for something outside Rath (consume.Waiting) is
// retried past MaxAttempts, and the event is handled once the wait is over:
// nothing is dead-lettered or recorded as failed.
func TestWaitingIsRetriedPastMaxAttempts(t *testing.T) {
	nc, c := setup(t)
	ctx := context.Background()
	const waits = 4
	var mu sync.Mutex
	deliveries := 0
	run(t, nc, c, consume.Handler{
		Name: "test-waiting", Tokens: []string{events.TokenConversation}, MaxAttempts: 2,
		Handle: func(_ context.Context, ev events.Stored) error {
			mu.Lock()
			deliveries++
			n := deliveries
			mu.Unlock()
			switch {
			case n <= waits:
				return consume.Waiting(errors.New("no program serves it yet"))
			case n == waits+1:
				// A transient failure after the waits is the first that
				// counts: the event is retried, not given up.
				return errors.New("the first answer timed out")
			}
			_, err := c.Emit(ctx, ev.Session, &events.WorkDone{WorkID: "served"})
			return err
		},
	})
	if _, err := c.Start(ctx, "w", events.SessionStarted{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Emit(ctx, "w", &events.ChunkAppended{Role: "user", Content: "x"}); err != nil {
		t.Fatal(err)
	}
	testrig.WaitFor(t, c, "w", events.TypeWorkDone)
	page, err := c.Log(ctx, "w", client.Range{From: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range page {
		if ev.Type == events.TypeHandlerFailed {
			t.Fatalf("a waiting handler was given up: %s", ev.Data)
		}
	}
	if consume.IsWaiting(consume.Permanent(errors.New("x"))) || !consume.IsWaiting(consume.Waiting(errors.New("x"))) || consume.Waiting(nil) != nil {
		t.Fatal("IsWaiting")
	}
}

// A handler started on a cluster with no meta leader yet (one node of
// three) waits, saying so, and consumes once the cluster has formed and
// the ledger created the streams: it never exits. (It exited on a timeout
// of its consumer's creation, and took the agent loop with it.)
func TestRunWaitsForAFormingCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a 3-node cluster")
	}
	c := natstest.StartClusterPartly(t, 3, 1)
	waiting := &logWatch{want: "waiting for the JetStream cluster", seen: make(chan struct{})}
	got := make(chan events.Stored, 1)
	nc := natstest.ConnectAs(t, c.URL(), auth.RoleAdmin)
	h := consume.Handler{Name: "forming", Tokens: []string{events.TokenLifecycle}, Types: []string{events.TypeSessionStarted},
		Handle: func(_ context.Context, ev events.Stored) error {
			select {
			case got <- ev:
			default:
			}
			return nil
		}}
	testrig.Run(t, "run", func(ctx context.Context) error {
		return consume.Run(ctx, nc, h, nil, slog.New(slog.NewTextHandler(waiting, nil)))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	select {
	case <-waiting.seen:
	case <-ctx.Done():
		t.Fatal("the handler never said it waits for the cluster")
	}
	for i := 1; i < c.Len(); i++ {
		c.Restart(i)
	}
	c.WaitReady()
	cfg := ledger.ConfigIn(t.TempDir())
	cfg.Store.Replicas = 3
	lnc := natstest.ConnectAs(t, c.URL(), auth.RoleLedger)
	testrig.Run(t, "ledger", func(ctx context.Context) error { return ledger.Run(ctx, lnc, cfg, quiet) })
	cl, err := client.New(natstest.ConnectAs(t, c.URL(), auth.RoleClient))
	if err != nil {
		t.Fatal(err)
	}
	a, err := cl.Start(ctx, "", events.SessionStarted{Task: "on a forming cluster"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-got:
		if ev.Session != a.Session {
			t.Fatalf("handled %s of %s, want %s", ev.Type, ev.Session, a.Session)
		}
	case <-ctx.Done():
		t.Fatal("the handler never saw the session's start")
	}
}

// logWatch is a log destination that closes seen once a line contains want.
type logWatch struct {
	want string
	seen chan struct{}
	once sync.Once
}

func (w *logWatch) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// Observe is shown every event received, handled or not, in order, before
// the handler gets the events it handles: a handler that folds sessions
// holds the session up to its trigger without reading the log.
func TestObserveSeesEveryEventBeforeItsHandler(t *testing.T) {
	nc, c := setup(t)
	ctx := context.Background()
	var (
		mu       sync.Mutex
		observed = map[string][]uint64{}
		handled  = map[string][]uint64{}
		bad      []string
	)
	run(t, nc, c, consume.Handler{
		Name: "test-observe", Tokens: events.Tokens(), Types: []string{events.TypeWorkDone}, Workers: 2,
		Observe: func(_ context.Context, ev events.Stored, streamSeq uint64) {
			mu.Lock()
			defer mu.Unlock()
			if streamSeq == 0 {
				bad = append(bad, "no stream sequence for "+ev.ID)
			}
			observed[ev.Session] = append(observed[ev.Session], ev.Seq)
		},
		Handle: func(_ context.Context, ev events.Stored) error {
			mu.Lock()
			defer mu.Unlock()
			if ev.Type != events.TypeWorkDone {
				bad = append(bad, "handled "+ev.Type)
			}
			if o := observed[ev.Session]; len(o) == 0 || o[len(o)-1] < ev.Seq {
				bad = append(bad, "handled "+ev.ID+" before observing it")
			}
			handled[ev.Session] = append(handled[ev.Session], ev.Seq)
			if len(handled[ev.Session]) == 2 {
				_, err := c.Emit(ctx, ev.Session, &events.SessionClosed{Outcome: "succeeded"})
				return err
			}
			return nil
		},
	})
	for _, id := range []string{"w1", "w2"} {
		if _, err := c.Start(ctx, id, events.SessionStarted{}); err != nil {
			t.Fatal(err)
		}
		for _, d := range []any{&events.ChunkAppended{Role: "user", Content: "x"}, &events.WorkDone{WorkID: "a"},
			&events.ChunkAppended{Role: "user", Content: "y"}, &events.WorkDone{WorkID: "b"}} {
			if _, err := c.Emit(ctx, id, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, id := range []string{"w1", "w2"} {
		testrig.WaitFor(t, c, id, events.TypeSessionClosed)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatal(strings.Join(bad, "; "))
	}
	for _, id := range []string{"w1", "w2"} {
		o := observed[id]
		for i := range 5 {
			if i >= len(o) || o[i] != uint64(i+1) {
				t.Fatalf("%s observed %v, want 1…5 in order first", id, o)
			}
		}
		if h := handled[id]; len(h) != 2 || h[0] != 3 || h[1] != 5 {
			t.Fatalf("%s handled %v, want its two work.done events, 3 and 5", id, h)
		}
	}
}
