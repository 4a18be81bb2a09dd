package client_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
	ledger "github.com/openrath/rath/services/session-ledger/service"
)

// On an existing NATS deployment with decentralized auth (a server in
// operator mode), the ledger and a tenant's user connect with standard NATS
// user credentials files minted with the permission table's templates, and
// work: a session starts and its state reads back, acting as the principal
// the JWT's tag names. The server enforces the template: the user may not
// publish outside its subjects.
func TestOperatorModeCreds(t *testing.T) {
	op := natstest.StartOperator(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ledgerOpts, ledgerWho, err := client.Credentials(op.CredsFile(t, "ledger", auth.RoleLedger, auth.RoleLedger.Principal()))
	if err != nil {
		t.Fatal(err)
	}
	if ledgerWho != auth.RoleLedger.Principal() {
		t.Fatalf("the ledger's file acts as %s", ledgerWho)
	}
	lnc, err := nats.Connect(op.URL(), ledgerOpts...)
	if err != nil {
		t.Fatalf("the ledger connects with its JWT: %v", err)
	}
	t.Cleanup(lnc.Close)
	testrig.Run(t, "ledger", func(ctx context.Context) error {
		return ledger.Run(ctx, lnc, ledger.ConfigIn(t.TempDir()), slog.New(slog.DiscardHandler))
	})

	alice := events.Principal{Tenant: "acme", User: "alice"}
	opts, who, err := client.Credentials(op.CredsFile(t, "alice", auth.RoleClient, alice))
	if err != nil {
		t.Fatal(err)
	}
	if who != alice {
		t.Fatalf("alice's file acts as %s", who)
	}
	violations := make(chan error, 4)
	nc, err := nats.Connect(op.URL(), append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			violations <- err
		}
	}))...)
	if err != nil {
		t.Fatalf("alice connects with her JWT: %v", err)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc, client.As(who))
	if err != nil {
		t.Fatal(err)
	}
	// The client retries while the ledger is still creating its streams.
	ack, err := c.Start(ctx, "jwt-session", events.SessionStarted{Task: "run on an operator-mode NATS"})
	if err != nil {
		t.Fatalf("start a session through the ledger: %v", err)
	}
	st, err := c.State(ctx, ack.Session)
	if err != nil {
		t.Fatalf("state of %s: %v", ack.Session, err)
	}
	if st.Task != "run on an operator-mode NATS" || st.Tenant != "acme" || st.StatusBy != alice.String() {
		t.Errorf("state: task %q, tenant %q, started by %q", st.Task, st.Tenant, st.StatusBy)
	}

	// Outside the template: another user's ledger subject, the stored log.
	for _, subj := range []string{events.Principal{Tenant: "acme", User: "bob"}.Ledger(events.OpState), events.SessionSubject("acme", ack.Session, "x")} {
		if err := nc.Publish(subj, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-violations:
			if !strings.Contains(err.Error(), subj) {
				t.Errorf("violation %v does not name %s", err, subj)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("alice may publish to %s on the operator-mode server", subj)
		}
	}
}

// A JWT whose tag names another user than its permissions allow acts as
// the tag's user to Rath, and the server refuses every request it makes
// under that name: the permissions, not the tag, are what is enforced.
func TestOperatorModeForgedTag(t *testing.T) {
	op := natstest.StartOperator(t)
	alice := events.Principal{Tenant: "acme", User: "alice"}
	bob := events.Principal{Tenant: "globex", User: "bob"}
	// alice's permissions, bob's tag.
	path := op.CredsFile(t, "forged", auth.RoleClient, alice, func(c *jwt.UserClaims) {
		c.Tags = jwt.TagList{auth.PrincipalTag + bob.String()}
	})
	opts, who, err := client.Credentials(path)
	if err != nil {
		t.Fatal(err)
	}
	if who != bob {
		t.Fatalf("the forged file acts as %s, want the tag's %s", who, bob)
	}
	violations := make(chan error, 4)
	nc, err := nats.Connect(op.URL(), append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			violations <- err
		}
	}))...)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	if err := nc.Publish(bob.Ledger(events.OpState), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-violations:
		if !strings.Contains(err.Error(), "globex") {
			t.Errorf("violation %v does not name bob's subject", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("a JWT with alice's permissions published as bob")
	}
}
