package testrig_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/natstest"
)

// A ledger from the rig stores what a client appends, and stops cleanly
// when asked.
func TestLedgerAppendsAndStops(t *testing.T) {
	ns, nc := natstest.Start(t)
	l := testrig.Ledger(t, ns.ClientURL())
	c, err := client.New(nc, client.WithRetryFor(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ack, err := c.Start(context.Background(), "s1", events.SessionStarted{Task: "rig"})
	if err != nil || ack.Seq != 1 {
		t.Fatalf("start: %+v, %v", ack, err)
	}
	if err := l.Stop(); err != nil {
		t.Fatalf("ledger stopped with %v", err)
	}
}

// Stop returns what the service returned, once its context is cancelled,
// and the same again.
func TestStopReturnsTheServicesError(t *testing.T) {
	boom := errors.New("boom")
	s := testrig.Run(t, "service", func(ctx context.Context) error {
		<-ctx.Done()
		return boom
	})
	for range 2 {
		if err := s.Stop(); !errors.Is(err, boom) {
			t.Fatalf("Stop: %v, want %v", err, boom)
		}
	}
}

// A bundle from the rig opens again as the workflow it was made of.
func TestBundleOpensAsTheWorkflow(t *testing.T) {
	ns, nc := natstest.Start(t)
	testrig.Ledger(t, ns.ClientURL())
	store, err := eventstore.AttachWait(context.Background(), nc)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, text := range map[string]string{
		"w.yaml": "name: w\nagents:\n  - {name: a, provider: scripted, script: a.yaml}\nrules:\n  - {name: r, when: \"false\", route: {agent: a}}\n",
		"a.yaml": "- content: hi\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wf, err := workflow.Load(filepath.Join(dir, "w.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ref := testrig.Bundle(t, store, wf)
	got, err := workflow.NewLibrary(store.GetBlob).Get(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if got.Workflow.Name != "w" || got.Workflow.Hash() != wf.Hash() {
		t.Fatalf("bundle opens as %s (%s), want w (%s)", got.Workflow.Name, got.Workflow.Hash(), wf.Hash())
	}
}
