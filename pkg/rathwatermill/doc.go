// Package rathwatermill connects Watermill (github.com/ThreeDotsLabs/watermill)
// to Rath: a message.Subscriber that delivers a tenant's stored session
// events from a durable feed of the ledger, and a message.Publisher that
// proposes messages as events through the ledger, where they are validated,
// sequenced and signed like any other event (ADR 0030).
//
// A topic is a session ID, or TopicAll: every session of the tenant (to
// subscribe), the session each message names in its MetadataSession (to
// publish). A subscriber's Consumer names its durable feed: subscribers with
// the same Consumer and topic share it (a consumer group), and a feed
// resumes where it was left after a restart. Delivery is at least once, one
// event of a feed at a time, so a session's events are handled in order; an
// event is acked after the handler acks it, and a Nack delivers it again.
//
// A tenant's user needs no JetStream access for any of it: the subscriber
// reads through the ledger's pull and settle operations and the live
// subject rath.session.<tenant>.>, the publisher through append.
package rathwatermill
