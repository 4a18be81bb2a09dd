package natstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/natstest"
)

// A 3-node cluster places an R3 stream, keeps it through a node's restart
// on the same store and ports, and accepts only its identities.
func TestClusterReplicatesAndRestartsANode(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	nc := natstest.ConnectAs(t, c.URL(), auth.RoleAdmin)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Replicas: 3, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "t.1", []byte("one")); err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("not replicated: %+v", info.Cluster)
	}
	leader := c.Index(info.Cluster.Leader)
	if leader < 0 {
		t.Fatalf("leader %q is not a node", info.Cluster.Leader)
	}
	c.Shutdown(leader)
	// As Rath's event store does: a publish the lost leader took with it
	// gets no ack; publish it again, same message ID, until one comes.
	for {
		actx, acancel := context.WithTimeout(ctx, time.Second)
		_, err := js.Publish(actx, "t.1", []byte("two"), jetstream.WithMsgID("two"))
		acancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("publish with a node down: %v", err)
		}
	}
	c.Restart(leader)
	c.WaitReady()
	info, err = st.Info(ctx)
	if err != nil || info.State.Msgs != 2 {
		t.Fatalf("after restart: %+v %v", info, err)
	}
	if nc, err := nats.Connect(c.URL()); err == nil {
		nc.Close()
		t.Fatal("an anonymous connection was accepted")
	}
}

// A cluster of nats-server processes keeps an R3 stream through its
// leader's SIGKILL and restart on the same store, and through a SIGSTOP
// and SIGCONT of the new leader.
func TestClusterProcessesSurviveKillAndPause(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds nats-server and starts three processes")
	}
	c := natstest.StartClusterProcesses(t, 3)
	if c.Server(0) != nil {
		t.Fatal("a process node has an in-process server")
	}
	js, err := jetstream.New(natstest.ConnectAs(t, c.URL(), auth.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Replicas: 3, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	leader := func() int {
		t.Helper()
		info, err := st.Info(ctx)
		if err != nil || info.Cluster == nil || c.Index(info.Cluster.Leader) < 0 {
			t.Fatalf("stream leader: %+v %v", info, err)
		}
		return c.Index(info.Cluster.Leader)
	}
	publish := func(js jetstream.JetStream, id string) {
		t.Helper()
		for {
			actx, acancel := context.WithTimeout(ctx, time.Second)
			_, err := js.Publish(actx, "t.1", []byte(id), jetstream.WithMsgID(id))
			acancel()
			if err == nil {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("publish %s: %v", id, err)
			}
		}
	}
	publish(js, "one")
	killed := leader()
	c.Kill(killed)
	publish(js, "two")
	c.Restart(killed)
	c.WaitReady()
	paused := leader()
	// A connection to the paused node hangs until it resumes (its socket
	// stays open): publish through another.
	other, err := jetstream.New(natstest.ConnectAs(t, c.ClientURL((paused+1)%c.Len()), auth.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	c.Pause(paused)
	publish(other, "three")
	c.Resume(paused)
	c.WaitReady()
	info, err := st.Info(ctx)
	if err != nil || info.State.Msgs != 3 {
		t.Fatalf("after a kill and a pause: %+v %v", info, err)
	}
	if nc, err := nats.Connect(c.URL()); err == nil {
		nc.Close()
		t.Fatal("an anonymous connection was accepted")
	}
}
