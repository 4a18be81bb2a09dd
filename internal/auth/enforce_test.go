package auth_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/natstest"
)

// violations connects as role and returns the connection with the
// permission violations the server reports on it.
func violations(t *testing.T, url string, role auth.Role) (*nats.Conn, <-chan error) {
	t.Helper()
	ch := make(chan error, 16)
	nc := natstest.ConnectAs(t, url, role, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			ch <- err
		}
	}))
	return nc, ch
}

// denied publishes on subject as role and fails the test unless the server
// reports a permission violation naming the subject.
func denied(t *testing.T, url string, role auth.Role, subject string) {
	t.Helper()
	nc, ch := violations(t, url, role)
	if err := nc.PublishRequest(subject, nc.NewRespInbox(), []byte(`{}`)); err != nil {
		t.Fatalf("%s: publish %s: %v", role, subject, err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("%s: flush: %v", role, err)
	}
	select {
	case err := <-ch:
		if !strings.Contains(err.Error(), `"`+subject+`"`) {
			t.Errorf("%s: violation %q does not name %s", role, err, subject)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("%s may publish to %s: no permission violation", role, subject)
	}
}

// streamState is what a denied write must not change.
func streamState(t *testing.T, js jetstream.JetStream, name string) jetstream.StreamState {
	t.Helper()
	st, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State
}

// TestServerEnforcesRoles: on the embedded server that rath up and the tests
// run, only the ledger writes the session log, the live subjects and the
// rejections; no worker or client purges or deletes; only admin does.
func TestServerEnforcesRoles(t *testing.T) {
	ns, admin := natstest.Start(t)
	url := ns.ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := eventstore.Open(ctx, natstest.ConnectAs(t, url, auth.RoleLedger), eventstore.DefaultConfig()); err != nil {
		t.Fatalf("the ledger creates the streams: %v", err)
	}
	ajs, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{events.SessionSubject(events.DefaultTenant, "s1", "session"), events.RejectSubject(events.DefaultTenant, "s1")} {
		if _, err := ajs.Publish(ctx, subj, []byte(`{"seed":true}`)); err != nil {
			t.Fatalf("admin publishes %s: %v", subj, err)
		}
	}
	before := map[string]jetstream.StreamState{}
	for _, s := range []string{events.StreamSessions, events.StreamRejects} {
		before[s] = streamState(t, ajs, s)
	}

	others := []auth.Role{auth.RoleSelector, auth.RoleAgentWorker, auth.RoleToolRunner, auth.RoleMemory, auth.RoleClient}
	for _, role := range others {
		t.Run(string(role), func(t *testing.T) {
			for _, subj := range []string{
				events.SessionSubject(events.DefaultTenant, "S", "x"), // rath.log.S.x
				"rath.session.S.x",
				events.RejectSubject(events.DefaultTenant, "S"),
				"$JS.API.STREAM.PURGE." + events.StreamRejects,
				"$JS.API.STREAM.MSG.DELETE." + events.StreamSessions,
				"$JS.API.STREAM.DELETE." + events.StreamSessions,
				"$JS.API.STREAM.UPDATE." + events.StreamSessions,
				"$KV." + events.BucketSessions + ".x",
			} {
				denied(t, url, role, subj)
			}
		})
	}
	t.Run("ledger", func(t *testing.T) { denied(t, url, auth.RoleLedger, "$JS.API.STREAM.DELETE."+events.StreamSessions) })
	t.Run("durables of others", func(t *testing.T) {
		denied(t, url, auth.RoleClient, "$JS.API.CONSUMER.CREATE."+events.StreamSessions+".agent-worker")
		denied(t, url, auth.RoleSelector, "$JS.API.CONSUMER.MSG.NEXT."+events.StreamSessions+".tool-runner")
		denied(t, url, auth.RoleAgentWorker, "$JS.API.CONSUMER.DELETE."+events.StreamInbox+"."+events.InboxConsumer)
		// The inbox is a work queue: a consumer's ack would remove a proposal.
		denied(t, url, auth.RoleClient, "$JS.API.CONSUMER.CREATE."+events.StreamInbox+".mine")
	})

	t.Run("unchanged", func(t *testing.T) {
		for s, want := range before {
			if got := streamState(t, ajs, s); got.Msgs != want.Msgs || got.LastSeq != want.LastSeq || got.FirstSeq != want.FirstSeq {
				t.Errorf("%s changed after denied writes: %+v, was %+v", s, got, want)
			}
		}
	})

	t.Run("allowed", func(t *testing.T) {
		// A client proposes through the inbox, with the JetStream ack.
		cjs, err := jetstream.New(natstest.ConnectAs(t, url, auth.RoleClient))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cjs.Publish(ctx, events.DefaultClient.Inbox("s1"), []byte(`{}`)); err != nil {
			t.Errorf("client proposes on the inbox: %v", err)
		}
		// A worker creates and reads its own durable consumer.
		sjs, err := jetstream.New(natstest.ConnectAs(t, url, auth.RoleSelector))
		if err != nil {
			t.Fatal(err)
		}
		cons, err := sjs.CreateOrUpdateConsumer(ctx, events.StreamSessions, jetstream.ConsumerConfig{
			Durable: auth.Durables(auth.RoleSelector)[0], FilterSubjects: []string{events.KindFilter("session")}, AckPolicy: jetstream.AckExplicitPolicy,
		})
		if err != nil {
			t.Fatalf("selector creates its consumer: %v", err)
		}
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("selector reads its consumer: %v", err)
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Errorf("selector acks: %v", err)
		}
	})

	t.Run("admin purges", func(t *testing.T) {
		st, err := ajs.Stream(ctx, events.StreamRejects)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Purge(ctx); err != nil {
			t.Fatalf("admin purges %s: %v", events.StreamRejects, err)
		}
		if got := streamState(t, ajs, events.StreamRejects); got.Msgs != 0 {
			t.Errorf("after the purge %s holds %d messages", events.StreamRejects, got.Msgs)
		}
	})
}

// TestUnknownIdentitiesRefused: no anonymous connection, and no key the
// server was not given.
func TestUnknownIdentitiesRefused(t *testing.T) {
	ns, _ := natstest.Start(t)
	if nc, err := nats.Connect(ns.ClientURL()); !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Errorf("anonymous connect: %v, want %v", err, nats.ErrAuthorization)
	}
	stranger, err := auth.Ensure(filepath.Join(t.TempDir(), "creds"))
	if err != nil {
		t.Fatal(err)
	}
	opts, _, err := auth.Options(stranger.Path(auth.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(ns.ClientURL(), opts...); !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Errorf("connect with another server's admin key: %v, want %v", err, nats.ErrAuthorization)
	}
}

// Served routers (ADR 0029): the selector asks, a program with the agent
// worker's identity answers, and no other role may ask one (its questions
// are the selector's only) or listen to the questions.
func TestOnlyTheSelectorAsksRouters(t *testing.T) {
	ns, _ := natstest.Start(t)
	url := ns.ClientURL()
	subject := events.RouteSubject(events.DefaultTenant, "triage")
	router := natstest.ConnectAs(t, url, auth.RoleAgentWorker)
	if _, err := router.QueueSubscribe(events.RouteFilter("triage"), "router-triage", func(m *nats.Msg) { _ = m.Respond([]byte(`{"agent":"coder"}`)) }); err != nil {
		t.Fatal(err)
	}
	if err := router.Flush(); err != nil {
		t.Fatal(err)
	}
	selector := natstest.ConnectAs(t, url, auth.RoleSelector)
	msg, err := selector.Request(subject, []byte(`{}`), 10*time.Second)
	if err != nil || string(msg.Data) != `{"agent":"coder"}` {
		t.Fatalf("the selector asks the router: %v %v", msg, err)
	}
	for _, role := range []auth.Role{auth.RoleClient, auth.RoleAgentWorker, auth.RoleToolRunner, auth.RoleMemory} {
		t.Run(string(role), func(t *testing.T) { denied(t, url, role, subject) })
	}
	nc, ch := violations(t, url, auth.RoleClient)
	if _, err := nc.Subscribe(events.RouteWildcard, func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	select {
	case err := <-ch:
		if !strings.Contains(err.Error(), events.RouteWildcard) {
			t.Errorf("violation %q does not name %s", err, events.RouteWildcard)
		}
	case <-time.After(10 * time.Second):
		t.Error("a client may listen to the routers' questions")
	}
}
