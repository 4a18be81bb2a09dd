package runtime

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
)

// rath up --nats on an existing NATS deployment in operator mode: the
// credentials directory holds each role's NATS user credentials file
// (<role>.creds, as nsc generates them, with the template's permissions),
// every service connects with its own and works, and no permission is
// missing from the templates.
func TestOperatorModeRuntime(t *testing.T) {
	op := natstest.StartOperator(t)
	dir := t.TempDir()
	for _, r := range auth.Roles() {
		path := filepath.Join(dir, string(r)+".creds")
		if err := os.WriteFile(path, op.Creds(t, r, r.Principal()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := testConfig(t)
	cfg.NATSURL, cfg.CredsDir = op.URL(), dir
	ctx := context.Background()
	rt, err := Start(ctx, cfg, WithClient("operator-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Stop()
	rt.StartLoop()
	if id := rt.Identities.Identity(auth.RoleLedger); !id.JWT {
		t.Errorf("the ledger's identity %+v: want its NATS user JWT", id)
	}
	if want := filepath.Join(dir, "client.creds"); rt.Creds != want {
		t.Errorf("the client's credentials %s, want %s", rt.Creds, want)
	}
	c, err := client.New(rt.Conn, client.WithRetryFor(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ack, err := c.Start(ctx, "op-1", events.SessionStarted{Task: "t"})
	if err != nil {
		t.Fatalf("start a session: %v (violations %v; services: %v)", err, rt.Violations(), rt.Stop())
	}
	if st, err := c.State(ctx, ack.Session); err != nil || st.Task != "t" {
		t.Fatalf("state: %v", err)
	}
	if err := rt.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	for _, err := range rt.Violations() {
		t.Errorf("permission violation: %v", err)
	}
}
