package client

import "github.com/nats-io/nats.go"

// WithDroppedLive loses the live messages drop reports true for, as a slow
// subscription does, so tests can make gaps in the live feed.
func WithDroppedLive(drop func(*nats.Msg) bool) WatchOption {
	return func(c *watchConfig) { c.drop = drop }
}

// AttachRecord is attachRecord, for the test of a reply that names a record
// it does not carry.
var AttachRecord = attachRecord
