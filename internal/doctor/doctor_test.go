package doctor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/doctor"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/session"
)

func find(t *testing.T, fs []doctor.Finding, check string) doctor.Finding {
	t.Helper()
	for _, f := range fs {
		if f.Check == check {
			return f
		}
	}
	t.Fatalf("no finding %q in %+v", check, fs)
	return doctor.Finding{}
}

func run(t *testing.T, url string, role auth.Role) []doctor.Finding {
	t.Helper()
	fs, err := doctor.Run(context.Background(), natstest.ConnectAs(t, url, role), doctor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// A deployment as rath up makes it, checked as admin: nothing fails, the
// identity is the admin role's, every stream and bucket is seen, and the
// clock is compared.
func TestHealthyDeployment(t *testing.T) {
	ns, _ := natstest.Start(t)
	testrig.Ledger(t, ns.ClientURL())
	waitLedger(t, ns.ClientURL())
	fs := run(t, ns.ClientURL(), auth.RoleAdmin)
	if doctor.Failed(fs) {
		t.Fatalf("a healthy deployment fails: %+v", fs)
	}
	if f := find(t, fs, "identity"); !strings.Contains(f.Detail, "admin role") {
		t.Errorf("identity: %+v", f)
	}
	for _, s := range []string{events.StreamSessions, events.StreamSigs, "KV_" + events.BucketHeads} {
		if f := find(t, fs, "stream "+s); f.Level != doctor.OK {
			t.Errorf("%s: %+v", s, f)
		}
	}
	if f := find(t, fs, "clock"); f.Level != doctor.OK {
		t.Errorf("clock: %+v", f)
	}

	// As a client: its own role, exactly, and what it cannot see said so.
	fs = run(t, ns.ClientURL(), auth.RoleClient)
	if f := find(t, fs, "identity"); f.Level != doctor.OK || !strings.Contains(f.Detail, "client role") {
		t.Errorf("identity as a client: %+v", f)
	}
	if f := find(t, fs, "jetstream"); f.Level != doctor.Warn || !strings.Contains(f.Fix, "admin.nk") {
		t.Errorf("a client reading the streams: %+v", f)
	}
}

// What Rath cannot run on is a failure that names the problem and its fix:
// no streams yet; a sessions stream that deletes evidence; a clock far off.
func TestBrokenDeployment(t *testing.T) {
	ns, nc := natstest.Start(t)
	fs := run(t, ns.ClientURL(), auth.RoleAdmin)
	if f := find(t, fs, "stream "+events.StreamSessions); f.Level != doctor.Fail || !strings.Contains(f.Fix, "start a ledger") {
		t.Fatalf("no streams: %+v", f)
	}
	if !doctor.Failed(fs) {
		t.Fatal("no streams, and nothing failed")
	}

	testrig.Ledger(t, ns.ClientURL())
	waitLedger(t, ns.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := js.Stream(ctx, events.StreamSessions)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxAge = time.Hour
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	fs, err = doctor.Run(ctx, nc, doctor.Options{Now: func() time.Time { return time.Now().Add(time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	if f := find(t, fs, "stream "+events.StreamSessions); f.Level != doctor.Fail || !strings.Contains(f.Detail, "delete evidence") {
		t.Errorf("a sessions stream with a max age: %+v", f)
	}
	if f := find(t, fs, "clock"); f.Level != doctor.Warn || !strings.Contains(f.Detail, "1m0") {
		t.Errorf("a clock a minute off: %+v", f)
	}
}

// waitLedger returns once the ledger answers (it has created its streams).
func waitLedger(t *testing.T, url string) {
	t.Helper()
	c, err := client.New(natstest.ConnectAs(t, url, auth.RoleClient))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		_, err := c.List(ctx, api.ListRequest{})
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the ledger never answered: %v", err)
		}
	}
}

// doctor names the active sessions that wait for a tool nobody offers (a
// turn's recorded wait), and says all is well when none does.
func TestSessionsWaitingForATool(t *testing.T) {
	ns, _ := natstest.Start(t)
	testrig.Ledger(t, ns.ClientURL())
	waitLedger(t, ns.ClientURL())
	if f := find(t, run(t, ns.ClientURL(), auth.RoleAdmin), "sessions"); f.Level != doctor.OK || !strings.Contains(f.Detail, "none waits") {
		t.Fatalf("no session waits: %+v", f)
	}
	c, err := client.New(natstest.ConnectAs(t, ns.ClientURL(), auth.RoleClient))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, id := range []string{"stalled", "busy"} {
		if _, err := c.Start(ctx, id, events.SessionStarted{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Emit(ctx, "stalled", &events.WorkPending{WorkID: "tool-wait-turn-1", Kind: session.WorkKindTool, Description: "turn turn-1 of coder waits for tool run_tests"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Emit(ctx, "busy", &events.WorkPending{WorkID: "todo-1", Kind: "todo", Description: "write the docs"}); err != nil {
		t.Fatal(err)
	}
	f := find(t, run(t, ns.ClientURL(), auth.RoleAdmin), "sessions")
	if f.Level != doctor.Warn || !strings.Contains(f.Detail, "1 of 2 active sessions wait for a tool nobody offers: stalled (since 2: turn turn-1 of coder waits for tool run_tests)") || strings.Contains(f.Detail, "busy") || f.Fix == "" {
		t.Fatalf("a session waiting for a tool: %+v", f)
	}
}
