// Package embedded runs a NATS server with JetStream inside the Rath process,
// so that `rath up` needs nothing installed.
package embedded

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/bind"
)

// Config configures the embedded server.
type Config struct {
	// Listen is host:port for client connections; port 0 picks a free one.
	Listen string
	// StoreDir holds JetStream's file storage.
	StoreDir string
	// SyncAlways fsyncs every write before the ack. The default acks once the
	// write reached the OS page cache and fsyncs every SyncInterval: a process
	// kill loses nothing, an OS crash or power loss can lose the last interval.
	SyncAlways bool
	// SyncInterval is the periodic fsync interval when SyncAlways is off
	// (0 keeps the server default, 2 minutes).
	SyncInterval time.Duration
	// MaxPayload bounds one message (default 8 MiB, enough for large snapshots).
	MaxPayload int32
	// ServerName names the server in logs and cluster views (default "rath").
	ServerName string
	// Users are the identities the server accepts, each with its role's
	// permissions (auth.Role.Permissions); any other connection is refused.
	// rath up always sets them. Empty leaves the server open to anyone: only
	// for tests and benchmarks that need no authentication.
	Users []auth.Identity
}

// Validate reports every problem of the configuration at once.
func (c Config) Validate() error {
	var errs []error
	if c.StoreDir == "" {
		errs = append(errs, errors.New("embedded NATS: store directory is required"))
	}
	if _, _, err := splitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("embedded NATS: listen address %q: %w", c.Listen, err))
	}
	for _, u := range c.Users {
		if _, err := auth.ParseRole(string(u.Role)); err != nil {
			errs = append(errs, fmt.Errorf("embedded NATS: user %s: %w", u.PublicKey, err))
		}
		if !nkeys.IsValidPublicUserKey(u.PublicKey) {
			errs = append(errs, fmt.Errorf("embedded NATS: user of role %s: %q is not a public user nkey", u.Role, u.PublicKey))
		}
	}
	if c.SyncInterval < 0 {
		errs = append(errs, errors.New("embedded NATS: sync interval must not be negative"))
	}
	return errors.Join(errs...)
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	return host, port, nil
}

// Start starts the server and waits until it accepts connections. Shut it
// down with Shutdown and WaitForShutdown. An address another process
// listens on is reported at once, as a *bind.InUseError naming it.
func Start(cfg Config) (*server.Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := bind.Check(cfg.Listen); err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	opts := options(cfg)
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		if err := bind.Check(cfg.Listen); err != nil { // taken since the check
			return nil, fmt.Errorf("embedded NATS: %w", err)
		}
		return nil, fmt.Errorf("embedded NATS: not ready after 10s (listen %s, store %s)", cfg.Listen, cfg.StoreDir)
	}
	return ns, nil
}

// options are the server options of a valid configuration.
func options(cfg Config) *server.Options {
	host, port, _ := splitHostPort(cfg.Listen)
	opts := &server.Options{
		ServerName: cfg.ServerName,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		MaxPayload: cfg.MaxPayload,
		NoSigs:     true,
		NoLog:      true,
	}
	opts.Nkeys = nkeyUsers(cfg.Users)
	if opts.ServerName == "" {
		opts.ServerName = "rath"
	}
	if opts.MaxPayload == 0 {
		opts.MaxPayload = 8 << 20
	}
	if cfg.SyncAlways {
		opts.SyncAlways = true
	} else if cfg.SyncInterval > 0 {
		opts.SyncInterval = cfg.SyncInterval
	}
	return opts
}

func nkeyUsers(users []auth.Identity) []*server.NkeyUser {
	if len(users) == 0 {
		return nil // the server then asks for no authentication at all
	}
	out := make([]*server.NkeyUser, 0, len(users))
	for _, u := range users {
		out = append(out, &server.NkeyUser{Nkey: u.PublicKey, Permissions: Permissions(u.Permissions())})
	}
	return out
}

// SetUsers replaces the identities a server Start started with cfg
// accepts, live: a tenant's user added with auth.Set.AddUser can connect
// once it returns. Connections of identities no longer listed are closed.
func SetUsers(ns *server.Server, cfg Config, users []auth.Identity) error {
	if len(users) == 0 {
		return errors.New("embedded NATS: set users: an empty list would open the server to anyone")
	}
	for _, u := range users {
		if !nkeys.IsValidPublicUserKey(u.PublicKey) {
			return fmt.Errorf("embedded NATS: set users: %q is not a public user nkey", u.PublicKey)
		}
	}
	cfg.Users = users
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("embedded NATS: set users: %w", err)
	}
	opts := options(cfg)
	// The port the server listens on, if it picked one.
	if addr, ok := ns.Addr().(*net.TCPAddr); ok {
		opts.Port = addr.Port
	}
	if err := ns.ReloadOptions(opts); err != nil {
		return fmt.Errorf("embedded NATS: set users: %w", err)
	}
	return nil
}

// Permissions converts a role's permissions to the server's form.
func Permissions(p auth.Permissions) *server.Permissions {
	sp := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: p.Publish.Allow, Deny: p.Publish.Deny},
		Subscribe: &server.SubjectPermission{Allow: p.Subscribe.Allow, Deny: p.Subscribe.Deny},
	}
	if p.Respond {
		sp.Response = &server.ResponsePermission{MaxMsgs: server.DEFAULT_ALLOW_RESPONSE_MAX_MSGS, Expires: server.DEFAULT_ALLOW_RESPONSE_EXPIRATION}
	}
	return sp
}
