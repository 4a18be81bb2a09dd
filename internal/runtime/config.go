package runtime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/embedded"
	"github.com/openrath/rath/internal/fold"
	worker "github.com/openrath/rath/services/agent-worker/service"
	memory "github.com/openrath/rath/services/memory-svc/service"
	selector "github.com/openrath/rath/services/selector/service"
	ledger "github.com/openrath/rath/services/session-ledger/service"
	toolrunner "github.com/openrath/rath/services/tool-runner/service"
)

// Fsync policies of the embedded server (Config.Sync).
const (
	SyncAlways   = "always"
	SyncInterval = "interval"
)

// Config is the whole configuration of a runtime, read once at the edge
// (the flags of rath up, demo or replay; a test; the bench).
type Config struct {
	// NATSURL names an existing NATS server; empty starts the embedded one.
	NATSURL string
	// CredsDir holds one credentials file per role (default <Data>/creds).
	CredsDir string
	// Embedded server: JetStream storage, client address, fsync policy.
	// Data also keeps the ledger's signing key (<Data>/keys/ledger.key)
	// unless Ledger names one.
	Data         string
	Listen       string
	Sync         string
	SyncInterval time.Duration
	// StateCacheBytes bounds, approximately, the one cache of folded
	// session states that the services of the runtime share (ADR 0038;
	// fold.CacheConfig.MaxBytes): the workers' own States bounds are not
	// used. 0: fold.DefaultMaxBytes.
	StateCacheBytes int64
	// Ledger configures the session ledger; the others the workers.
	Ledger     ledger.Config
	Selector   selector.Config
	Worker     worker.Config
	ToolRunner toolrunner.Config
	Memory     memory.Config
	// NoHandOff runs the selector and the agent worker of one runtime as
	// apart: each turn request reaches the worker by its JetStream delivery
	// only, not also handed over in the process (ADR 0038 item 5).
	NoHandOff bool
}

// DefaultConfig is rath up's configuration without flags: the embedded
// server on 127.0.0.1:4222 storing under ./.rath/data, workspaces under
// ./.rath/workspaces (seeded from what clients pack, ADR 0031). The tool runner's
// sandboxes get this process's PATH and the environment variables
// toolrunner.PassEnvDefault names.
func DefaultConfig() Config {
	tr := toolrunner.DefaultConfig()
	tr.Sandbox.Root = "./.rath/workspaces"
	tr.Sandbox.Path = os.Getenv("PATH")
	tr.Sandbox.Env = toolrunner.SandboxEnv(toolrunner.PassEnvDefault, os.Getenv)
	tr.Remote.Key = os.Getenv(toolrunner.RemoteKeyEnv)
	return Config{
		Data:            "./.rath/data",
		Listen:          "127.0.0.1:4222",
		Sync:            SyncInterval,
		SyncInterval:    2 * time.Minute,
		StateCacheBytes: fold.DefaultMaxBytes,
		Ledger:          ledger.DefaultConfig(),
		Selector:        selector.DefaultConfig(),
		Worker:          worker.DefaultConfig(),
		ToolRunner:      tr,
		Memory:          memory.DefaultConfig(),
	}
}

// Private is c for a private runtime of one process (rath demo, rath
// replay): the embedded server on a free port storing under
// <dir>/jetstream, workspaces under <dir>/workspaces.
func (c Config) Private(dir string) Config {
	c.NATSURL, c.CredsDir = "", ""
	c.Data = filepath.Join(dir, "jetstream")
	c.Listen = "127.0.0.1:0"
	c.ToolRunner.Sandbox.Root = filepath.Join(dir, "workspaces")
	return c
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	errs := []error{c.LedgerConfig().Validate(), c.Worker.Validate(), c.ToolRunner.Validate()}
	switch {
	case c.StateCacheBytes < 0:
		errs = append(errs, fmt.Errorf("--state-cache-bytes must not be negative, got %d", c.StateCacheBytes))
	case c.StateCacheBytes > MaxStateCacheBytes:
		errs = append(errs, fmt.Errorf("--state-cache-bytes %d is more than %d (1 TiB): it bounds states kept in this process's memory", c.StateCacheBytes, int64(MaxStateCacheBytes)))
	}
	if c.NATSURL == "" {
		if c.Sync != SyncAlways && c.Sync != SyncInterval {
			errs = append(errs, fmt.Errorf("--sync must be %s or %s, got %q", SyncAlways, SyncInterval, c.Sync))
		}
		errs = append(errs, c.Embedded().Validate())
	}
	return errors.Join(errs...)
}

// MaxStateCacheBytes is the largest Config.StateCacheBytes: 1 TiB, beyond
// the memory of the machines Rath runs on (a larger bound is a typo).
const MaxStateCacheBytes = 1 << 40

// StateCache is the configuration of the cache of folded session states
// the services share: bounded by StateCacheBytes, looking for snapshots
// where the ledger stores them.
func (c Config) StateCache() fold.CacheConfig {
	return fold.CacheConfig{MaxBytes: c.StateCacheBytes, SnapshotEvery: c.Ledger.Ledger.SnapshotEvery, Shared: true}
}

// LedgerConfig is the ledger's configuration, its signing key kept in the
// data directory (<Data>/keys/ledger.key) unless one is named.
func (c Config) LedgerConfig() ledger.Config {
	l := c.Ledger
	if l.KeyFile == "" && l.Ledger.Key == nil {
		l.KeyFile = ledger.KeyFileIn(c.Data)
	}
	if l.ApproversFile == "" {
		l.ApproversFile = filepath.Join(c.CredsPath(), auth.ApproversFile)
	}
	return l
}

// Embedded is the embedded server's configuration, without its users.
func (c Config) Embedded() embedded.Config {
	return embedded.Config{
		Listen:       c.Listen,
		StoreDir:     c.Data,
		SyncAlways:   c.Sync == SyncAlways,
		SyncInterval: c.SyncInterval,
	}
}

// CredsPath is where the roles' credentials files are.
func (c Config) CredsPath() string {
	if c.CredsDir != "" {
		return c.CredsDir
	}
	return filepath.Join(c.Data, "creds")
}

// identities returns the credentials of every role: created on the first
// start of the embedded server and reused after; with NATSURL, read from
// the credentials directory if it exists (nil, connecting without
// credentials, if it does not).
func (c Config) identities() (*auth.Set, error) {
	dir := c.CredsPath()
	if c.NATSURL == "" {
		set, err := auth.Ensure(dir)
		if err != nil {
			return nil, fmt.Errorf("credentials: %w", err)
		}
		return set, nil
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	set, err := auth.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("credentials of the services in %s: %w", dir, err)
	}
	return set, nil
}
