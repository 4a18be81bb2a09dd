package client

import (
	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/events"
)

// The errors of Credentials, wrapped with the file's path: a credentials
// file that does not exist, and one that holds no usable nkey seed.
var (
	ErrNoCredentials  = auth.ErrNoCredentials
	ErrBadCredentials = auth.ErrBadCredentials
)

// Credentials reads a credentials file as rath up writes them (one per
// role, <data>/creds/<role>.creds, and tenants/<tenant>/<user>.creds for a
// tenant's users) and returns the nats.go options that authenticate a
// connection with it, and the principal it acts as, for As. A client
// identity's options include its reply prefix, the only one it may
// subscribe to. The file is checked before any connection, so a missing or
// broken one is reported by name.
func Credentials(path string) ([]nats.Option, events.Principal, error) {
	opts, id, err := auth.Options(path)
	if err != nil {
		return nil, events.Principal{}, err
	}
	return opts, id.Principal, nil
}
