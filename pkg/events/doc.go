// Package events is Rath's event catalog: the wire names of every session event,
// the Go type of each kind's data, the CloudEvents envelope with Rath's extension
// attributes, the subject scheme, and the hash chain that makes a session log
// tamper-evident. Every service builds and reads events through this package, so
// there is exactly one mapping between a wire name, a Go type, a JSON Schema and
// a subject token.
package events
