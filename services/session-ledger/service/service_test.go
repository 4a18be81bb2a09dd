package service_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/services/session-ledger/service"
)

// The real wiring, in-process: serve, take a proposal through the inbox and
// one by request, then stop and check Run returns cleanly with nothing lost.
func TestRunServesAndShutsDownCleanly(t *testing.T) {
	ns, nc := natstest.Start(t)
	lnc := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleLedger)
	cfg := service.ConfigIn(t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- service.Run(ctx, lnc, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()

	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(ctx, "svc", events.SessionStarted{Task: "component test"}); err != nil {
		t.Fatal(err)
	}
	ev, _ := events.New("svc", &events.ChunkAppended{Role: events.RoleUser, Content: "via inbox"})
	if err := c.Propose(ctx, ev); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	err = c.Watch(wctx, "svc", func(got events.Stored) error {
		if got.ID == ev.ID() {
			wcancel()
		}
		return nil
	}, client.From(2))
	if err != context.Canceled {
		t.Fatalf("watch: %v", err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v", err)
	}
	// Stopped: the events are still there for the next ledger.
	restart, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		done <- service.Run(restart, lnc, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	rep, err := c.Verify(restart, "svc")
	if err != nil || !rep.OK || rep.Head != 2 {
		t.Fatalf("after restart: %+v %v", rep, err)
	}
	if _, err := c.State(restart, "nope"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("missing session: %v", err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("second Run returned %v", err)
	}
}

// A ledger without a key file, or with a trusted key file it cannot read,
// does not start, and says which.
func TestRunRefusesBadKeys(t *testing.T) {
	ns, _ := natstest.Start(t)
	lnc := natstest.ConnectAs(t, ns.ClientURL(), auth.RoleLedger)
	quiet := slog.New(slog.DiscardHandler)
	if err := service.Run(context.Background(), lnc, service.DefaultConfig(), quiet); err == nil || !strings.Contains(err.Error(), "signing key file is required (--key)") {
		t.Errorf("no key: %v", err)
	}
	cfg := service.ConfigIn(t.TempDir())
	cfg.TrustedKeyFiles = []string{filepath.Join(t.TempDir(), "missing.pub")}
	if err := service.Run(context.Background(), lnc, cfg, quiet); err == nil || !strings.Contains(err.Error(), "trusted keys (--trust): public key file") || !strings.Contains(err.Error(), "missing.pub") {
		t.Errorf("missing trusted key: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "ledger.key")
	os.WriteFile(bad, []byte("not a key"), 0o600)
	cfg = service.DefaultConfig()
	cfg.KeyFile = bad
	if err := service.Run(context.Background(), lnc, cfg, quiet); err == nil || !strings.Contains(err.Error(), "signing key "+bad) {
		t.Errorf("bad key file: %v", err)
	}
}

// A signing key any user of the host may read is refused, naming the file
// and the fix; the owner's and the group's are accepted (ADR 0031).
func TestKeyReadableByOthersIsRefused(t *testing.T) {
	path := service.KeyFileIn(t.TempDir())
	if _, created, err := service.LoadOrCreateKey(path); err != nil || !created {
		t.Fatalf("create: %v (created %v)", err, created)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("a new key's mode: %v, %v; want 0600", fi.Mode(), err)
	}
	for mode, ok := range map[os.FileMode]bool{0o600: true, 0o440: true, 0o400: true, 0o604: false, 0o644: false, 0o666: false, 0o601: false} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, created, err := service.LoadOrCreateKey(path)
		if ok && (err != nil || created) {
			t.Errorf("mode %04o: %v (created %v), want the key read", mode, err, created)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), "chmod 600 "+path)) {
			t.Errorf("mode %04o: %v, want a refusal naming chmod 600 %s", mode, err, path)
		}
	}
}

// Ledgers starting at once on one directory all read the one key one of
// them wrote, whole: none writes its own, and none reads it half written.
func TestLedgersStartingAtOnceShareOneKey(t *testing.T) {
	for range 20 {
		path := service.KeyFileIn(t.TempDir())
		const n = 8
		keys := make(chan string, n)
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				k, _, err := service.LoadOrCreateKey(path)
				if err != nil {
					errs <- err
					return
				}
				keys <- k.Public().ID
			}()
		}
		wg.Wait()
		close(keys)
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		first := ""
		for id := range keys {
			if first == "" {
				first = id
			} else if id != first {
				t.Fatalf("two keys: %s and %s", first, id)
			}
		}
		if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".ledger-key-*")); len(left) > 0 {
			t.Fatalf("temporary files left: %v", left)
		}
	}
}
