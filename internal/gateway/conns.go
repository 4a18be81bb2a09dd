package gateway

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// ErrClosed is Conns.Client's error once the gateway stops.
var ErrClosed = errors.New("the gateway is stopping")

// Conns connects to the bus as tenants' users, one connection each, opened
// on a user's first call with the user's own credentials file: the
// server's permissions and the ledger's tenant checks and quotas apply to
// what the gateway does for a caller as to the caller's own programs.
type Conns struct {
	url  string
	path func(events.Principal) string
	opts []nats.Option
	// reload, if set, makes the server learn users added since it
	// started (rath up's embedded server): a user's first connection that
	// fails is tried once more after it.
	reload func() error

	mu     sync.Mutex
	conns  map[events.Principal]*client.Client
	closed bool
}

// NewConns returns connections to url as the users whose credentials files
// path names; opts are added to each connection's (an in-process server's).
// reload, if not nil, makes the server learn users added since it started;
// a user's first connection that fails is tried once more after it.
func NewConns(url string, path func(events.Principal) string, reload func() error, opts ...nats.Option) *Conns {
	return &Conns{url: url, path: path, reload: reload, opts: opts, conns: map[events.Principal]*client.Client{}}
}

// UserCreds is where rath up keeps a user's credentials file in dir: the
// client role's file for the default client, tenants/<tenant>/<user>.nk
// for every other.
func UserCreds(dir string) func(events.Principal) string {
	return func(p events.Principal) string {
		if p == events.DefaultClient {
			return filepath.Join(dir, auth.FileName(auth.RoleClient))
		}
		return auth.UserPath(dir, p)
	}
}

// Client returns a client acting as p, connecting it first if need be.
func (c *Conns) Client(_ context.Context, p events.Principal) (*client.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if cl := c.conns[p]; cl != nil {
		return cl, nil
	}
	opts, who, err := client.Credentials(c.path(p))
	if err != nil {
		return nil, fmt.Errorf("credentials of %s: %w", p, err)
	}
	if who != p {
		return nil, fmt.Errorf("the credentials file of %s is %s's", p, who)
	}
	opts = append(append(opts, client.KeepAlive()...), nats.Name("rath model-gateway as "+p.String()))
	opts = append(opts, c.opts...)
	nc, err := nats.Connect(c.url, opts...)
	if err != nil && c.reload != nil {
		// A user added after the server started: it learns it now.
		if rerr := c.reload(); rerr != nil {
			return nil, fmt.Errorf("connect as %s: %w (and the server did not reload its users: %v)", p, err, rerr)
		}
		nc, err = nats.Connect(c.url, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("connect as %s: %w", p, err)
	}
	cl, err := client.New(nc, client.As(p), client.WithSource(Source))
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.conns[p] = cl
	return cl, nil
}

// Close drains every connection.
func (c *Conns) Close() {
	c.mu.Lock()
	conns := c.conns
	c.conns, c.closed = nil, true
	c.mu.Unlock()
	for _, cl := range conns {
		_ = cl.Conn().Drain()
	}
}
