package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/toolserver"
	"github.com/openrath/rath/services/session-ledger/service"
)

// feedNames lists the names of the durable feeds on RATH_SESSIONS.
func feedNames(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, events.StreamSessions)
	if err != nil {
		t.Fatal(err)
	}
	var feeds []string
	names := st.ConsumerNames(ctx)
	for n := range names.Name() {
		if strings.HasPrefix(n, "feed-") {
			feeds = append(feeds, n)
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return feeds
}

// The attack of issue 29: one tenant's user pulls with ever new feed names
// to create consumers until the server has none left for anyone. With the
// quotas, the tenant gets its quota of feeds and a quota_exceeded refusal
// that names the quota, its limit and its flag for each one more; a
// restarted ledger counts the feeds it finds; another tenant's user still
// pulls; and a tool server still registers, its durable consumer fitting
// under the stream's consumer limit because the tenants' feeds together
// are bounded below it. RATH_SESSIONS' limit is lowered to 8 for the test
// (nats-server's default is 1000 a stream) so that the test need not
// create hundreds of consumers: 4 feeds a tenant, 6 in all, 2 left for
// services.
func TestFeedQuotaLeavesOtherTenantsAndServicesWorking(t *testing.T) {
	ns, admin := natstest.Start(t)
	url := ns.ClientURL()
	ctx := context.Background()
	users := map[string]*client.Client{}
	for _, p := range []events.Principal{alice, bob, {Tenant: "initech", User: "peter"}} {
		c, err := client.New(natstest.ConnectUser(t, url, p), client.As(p), client.WithTimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		users[p.Tenant] = c
	}
	quotas := func(c *service.Config) {
		c.Ledger.Quotas.FeedsPerTenant, c.Ledger.Quotas.Feeds = 4, 6
	}
	ledger := testrig.Ledger(t, url, quotas)
	// (A session's start waits for the ledger to serve.)
	for tenant, c := range users {
		if _, err := c.Start(ctx, tenant+"-s", events.SessionStarted{Task: "work of " + tenant}); err != nil {
			t.Fatal(err)
		}
	}
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	// The ledger made the stream; what nats-server would enforce at 1000.
	st, err := js.Stream(ctx, events.StreamSessions)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxConsumers = 8
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}

	acme := users["acme"]
	var created, refused int
	for i := range 40 {
		feed := fmt.Sprintf("flood-%02d", i)
		r, err := acme.Pull(ctx, api.PullRequest{Consumer: feed})
		switch {
		case err == nil && len(r.Events) == 1:
			created++
		case errors.Is(err, api.ErrQuotaExceeded):
			for _, want := range []string{"tenant acme keeps 4 durable feeds", "quota feeds: 4", "--quota-feeds", feed} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("refusal %q does not say %q", err, want)
				}
			}
			refused++
		default:
			t.Fatalf("pull of feed %s: %+v, %v", feed, r, err)
		}
	}
	if created != 4 || refused != 36 {
		t.Fatalf("%d feeds created, %d refused; want 4 and 36", created, refused)
	}
	if n := len(feedNames(t, js)); n != 4 {
		t.Fatalf("%d consumers of feeds on %s, want acme's 4", n, events.StreamSessions)
	}
	// A feed the tenant has keeps working.
	if r, err := acme.Pull(ctx, api.PullRequest{Consumer: "flood-00"}); err != nil || len(r.Events) != 0 {
		t.Fatalf("pull of a feed acme keeps, its one event out: %+v, %v", r, err)
	}

	// A restarted ledger counts the feeds in JetStream: none more for acme.
	if err := ledger.Stop(); err != nil {
		t.Fatal(err)
	}
	testrig.Ledger(t, url, quotas)
	if _, err := acme.Pull(ctx, api.PullRequest{Consumer: "after-restart"}); !errors.Is(err, api.ErrQuotaExceeded) {
		t.Fatalf("a new feed of acme after a restart: %v, want quota_exceeded", err)
	}
	// (The ledger's start made the stream's consumer limit the default again.)
	cfg.MaxConsumers = 8
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}

	// Another tenant pulls; the tenants' feeds together stop at 6.
	globex := users["globex"]
	for _, feed := range []string{"workers", "audit"} {
		if r, err := globex.Pull(ctx, api.PullRequest{Consumer: feed}); err != nil || len(r.Events) != 1 {
			t.Fatalf("globex pulls feed %s while acme is at its quota: %+v, %v", feed, r, err)
		}
	}
	_, err = users["initech"].Pull(ctx, api.PullRequest{Consumer: "workers"})
	if !errors.Is(err, api.ErrQuotaExceeded) || !strings.Contains(err.Error(), "quota feeds-all: 6") || !strings.Contains(err.Error(), "--quota-feeds-all") {
		t.Fatalf("a seventh feed: %v, want quota_exceeded naming feeds-all", err)
	}

	// A tool server registers: its durable consumer fits in what the
	// tenants' feeds leave.
	toolNC := natstest.ConnectAs(t, url, auth.RoleToolRunner)
	testrig.Run(t, "tool server", func(ctx context.Context) error {
		return toolserver.Serve(ctx, toolNC, toolserver.Tool{
			Name: "echo", Description: "echoes",
			Handle: func(_ context.Context, args json.RawMessage) (string, error) { return string(args), nil },
		})
	})
	testrig.Eventually(t, 30*time.Second, "the tool server's consumer", func() (bool, string) {
		_, err := js.Consumer(ctx, events.StreamSessions, toolserver.Durable("echo"))
		return err == nil, fmt.Sprint(err)
	})
	// The limit is real: past it the server refuses a consumer to anyone,
	// as it refused the tool runner's registrations in issue 29.
	for i := 0; ; i++ {
		_, err := js.CreateOrUpdateConsumer(ctx, events.StreamSessions, jetstream.ConsumerConfig{Durable: fmt.Sprintf("filler-%d", i), AckPolicy: jetstream.AckExplicitPolicy})
		if errors.Is(err, jetstream.ErrMaximumConsumersLimit) {
			break
		}
		if err != nil || i == 8 {
			t.Fatalf("consumer %d past the tenants' feeds and the tool server: %v, want the server's maximum consumers limit before the ninth", i, err)
		}
	}
}

// A feed naming another tenant's session, or a session that does not
// exist, is refused as session_not_found, as every other operation
// answers of such a session (issue 29), and no consumer is created for it.
func TestFeedOfAnotherTenantsSessionIsNotFound(t *testing.T) {
	r := newTenantRig(t)
	ctx := context.Background()
	if _, err := r.bob.Start(ctx, "globex-only", events.SessionStarted{Task: "b"}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(r.admin)
	if err != nil {
		t.Fatal(err)
	}
	before := len(feedNames(t, js))
	for _, session := range []string{"globex-only", "never-started"} {
		_, err := r.alice.Pull(ctx, api.PullRequest{Consumer: "peek", Session: session})
		if !errors.Is(err, api.ErrNotFound) || !strings.Contains(err.Error(), "session "+session+" does not exist") {
			t.Errorf("acme pulls a feed of %s: %v, want session_not_found", session, err)
		}
	}
	if after := len(feedNames(t, js)); after != before {
		t.Fatalf("%d feeds after the refused pulls, %d before", after, before)
	}
	// Its own tenant's user reads the session's feed.
	if p := pullOne(t, r.bob, api.PullRequest{Consumer: "peek", Session: "globex-only"}); p == nil {
		t.Fatal("globex has no event in its own session's feed")
	}
}

// The blob quota's count lives in the bucket rath-quota, which the ledger
// creates and updates with its own role's permissions: a tenant's new
// blob adds its bytes under its tenant, content stored already adds
// nothing, and another tenant's count is its own.
func TestBlobBytesAreCountedPerTenant(t *testing.T) {
	r := newTenantRig(t)
	ctx := context.Background()
	blob := []byte(strings.Repeat("evidence ", 100))
	for _, c := range []*client.Client{r.alice, r.carol, r.bob} {
		if _, err := c.PutBlob(ctx, blob); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.bob.PutBlob(ctx, []byte("bob's own")); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(r.admin)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "rath-quota")
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"blob-bytes.acme": fmt.Sprint(len(blob)), "blob-bytes.globex": fmt.Sprint(len("bob's own"))} {
		e, err := kv.Get(ctx, key)
		if err != nil {
			t.Errorf("%s: %v", key, err)
		} else if string(e.Value()) != want {
			t.Errorf("%s = %s, want %s", key, e.Value(), want)
		}
	}
}
