package runtime

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/daemon"
	"github.com/openrath/rath/pkg/client"
)

// Errors a ConnectError matches with errors.Is, for callers that map them
// (rath's exit codes).
var (
	// ErrDenied: NATS refused a service's identity (no credentials, or
	// credentials it does not know).
	ErrDenied = errors.New("denied")
	// ErrUnreachable: no NATS server answered.
	ErrUnreachable = errors.New("unreachable")
)

// ConnectError says why a service could not connect to NATS: the message
// names the URL, the role and the credentials file; Err is NATS's error.
type ConnectError struct {
	Msg    string
	Err    error
	denied bool
}

func (e *ConnectError) Error() string { return fmt.Sprintf("%s (%v)", e.Msg, e.Err) }

func (e *ConnectError) Unwrap() error { return e.Err }

// Is matches ErrDenied or ErrUnreachable, whichever the error is.
func (e *ConnectError) Is(target error) bool {
	return e.denied && target == ErrDenied || !e.denied && target == ErrUnreachable
}

// dial connects as a role and returns the connection with a function that
// drains it and waits until it is closed. The empty role gets no connection.
type dial func(role auth.Role) (*nats.Conn, func(), error)

// dialer returns how the services connect: to url (in-process when ns, the
// embedded server of this process, is set), each with its own role's
// credentials, so that the server enforces each service's permissions.
// Errors NATS reports are logged with the role; permission violations also
// go to violated.
func dialer(url string, ns *server.Server, creds *auth.Set, logFor func(auth.Role) *slog.Logger, violated func(auth.Role, error)) dial {
	return func(role auth.Role) (*nats.Conn, func(), error) {
		if role == "" {
			return nil, func() {}, nil
		}
		closed := make(chan struct{})
		rlog := logFor(role).With("role", string(role))
		opts := []nats.Option{
			nats.Name("rath-" + string(role)), nats.MaxReconnects(-1),
			nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
			nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
				if errors.Is(err, nats.ErrPermissionViolation) {
					violated(role, err)
				}
				if sub != nil {
					rlog.Error("NATS error", "subject", sub.Subject, "err", err)
					return
				}
				rlog.Error("NATS error", "err", err)
			}),
		}
		opts = append(opts, client.KeepAlive()...)
		opts = append(opts, daemon.ReconnectLog(rlog)...)
		if creds != nil {
			cred, _, err := auth.Options(creds.Path(role))
			if err != nil {
				return nil, nil, err
			}
			opts = append(opts, cred...)
		}
		if ns != nil {
			opts = append(opts, nats.InProcessServer(ns))
		}
		nc, err := nats.Connect(url, opts...)
		if err != nil {
			return nil, nil, connectError(url, creds, role, err)
		}
		return nc, func() {
			if err := nc.Drain(); err != nil {
				nc.Close()
			}
			<-closed
		}, nil
	}
}

// connectError explains why a service could not connect.
func connectError(url string, creds *auth.Set, role auth.Role, err error) error {
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
		if creds == nil {
			return &ConnectError{fmt.Sprintf("NATS at %s refused %s: it needs credentials, and there is no credentials directory (--creds-dir)", url, role), err, true}
		}
		return &ConnectError{fmt.Sprintf("NATS at %s refused %s's credentials %s: is the server configured with them (deploy/nats-server.conf)?", url, role, creds.Path(role)), err, true}
	}
	return &ConnectError{"no NATS server at " + url, err, false}
}
