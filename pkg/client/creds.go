package client

import (
	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/events"
)

// The errors of Credentials, wrapped with the file's path: a credentials
// file that does not exist, and one that holds no usable nkey seed or whose
// user JWT is garbled, expired, not its seed's, or names no Rath principal.
var (
	ErrNoCredentials  = auth.ErrNoCredentials
	ErrBadCredentials = auth.ErrBadCredentials
)

// Credentials reads a credentials file and returns the nats.go options
// that authenticate a connection with it, and the principal it acts as,
// for As. It reads the nkey seed files rath up writes (one per role,
// <data>/creds/<role>.nk, and tenants/<tenant>/<user>.nk for a tenant's
// users; an earlier Rath's <role>.creds too), and the standard NATS user
// credentials files (.creds, a user JWT and its seed) of a server in
// operator mode, whose JWT names the principal with a tag
// rath-principal:<tenant>/<user> (docs/security.md). A client identity's
// options include its reply prefix, the only one it may subscribe to. The
// file is checked before any connection, so a missing or broken one is
// reported by name.
func Credentials(path string) ([]nats.Option, events.Principal, error) {
	opts, id, err := auth.Options(path)
	if err != nil {
		return nil, events.Principal{}, err
	}
	return opts, id.Principal, nil
}
