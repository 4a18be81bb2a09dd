// Package auth defines who may do what on Rath's bus: the roles, the subjects
// each role may publish and subscribe to, and the credentials files that
// identify a connection as one role. The NATS server enforces the table:
// rath up's embedded server and an external server configured from deploy/.
//
// The table is defined once, here; the embedded server, the deploy
// configuration (ServerConfig) and docs/security.md are derived from it.
package auth

import (
	"fmt"
	"slices"
	"strings"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/memoryapi"
)

// Role names an identity on the bus. Its string is the credentials file's
// base name (<role>.nk) and never changes: deployed identities use it.
type Role string

// The roles. Each Rath service has its own; operators use admin, users and
// their programs use client.
const (
	RoleLedger      Role = "ledger"
	RoleSelector    Role = "selector"
	RoleAgentWorker Role = "agent-worker"
	RoleToolRunner  Role = "tool-runner"
	RoleMemory      Role = "memory-svc"
	RoleAdmin       Role = "admin"
	RoleClient      Role = "client"
)

// Roles returns every role, services first, in a stable order.
func Roles() []Role {
	return []Role{RoleLedger, RoleSelector, RoleAgentWorker, RoleToolRunner, RoleMemory, RoleAdmin, RoleClient}
}

// ParseRole returns the role named s.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles() {
		if string(r) == s {
			return r, nil
		}
	}
	names := make([]string, 0, len(Roles()))
	for _, r := range Roles() {
		names = append(names, string(r))
	}
	return "", fmt.Errorf("unknown role %q: want one of %s", s, strings.Join(names, ", "))
}

// Subjects lists subjects (NATS wildcards allowed) a role may use, and
// exceptions: a subject matching Deny is refused even if Allow matches.
// Anything Allow does not match is refused.
type Subjects struct {
	Allow []string
	Deny  []string
}

// Permissions is what one role may do.
type Permissions struct {
	Publish   Subjects
	Subscribe Subjects
	// Respond lets the role reply once to each request it received, on the
	// request's reply subject, without a publish permission on _INBOX.>
	// (nats-server's allow_responses).
	Respond bool
}

// Permissions returns the role's permissions; an unknown role has none.
func (r Role) Permissions() Permissions {
	switch r {
	case RoleAdmin:
		return Permissions{Publish: Subjects{Allow: []string{">"}}, Subscribe: Subjects{Allow: []string{">"}}}
	case RoleLedger:
		return ledger()
	case RoleSelector, RoleAgentWorker, RoleToolRunner, RoleMemory:
		return worker(r)
	case RoleClient:
		return ClientPermissions(events.DefaultClient)
	}
	return Permissions{}
}

// Principal is the principal a role's own identity acts as: a service of
// Rath for the services and admin, the default tenant's client for client.
func (r Role) Principal() events.Principal {
	if r == RoleClient {
		return events.DefaultClient
	}
	return events.Service(string(r))
}

// UserInfo is the server's "who am I" request: every role may ask it, for
// its own identity and permissions only (rath doctor shows them).
const UserInfo = "$SYS.REQ.USER.INFO"

// ClientPermissions is what a user of a tenant may do: ask the ledger and
// the memory service, and propose, under its own name only; read its own
// replies; watch its tenant's sessions. Nothing else: it reads the log, the
// rejections and blobs through the ledger, which checks the tenant, and has
// no JetStream API at all (ADR 0015).
func ClientPermissions(p events.Principal) Permissions {
	return Permissions{
		Publish: Subjects{Allow: []string{
			p.Ledger(">"), p.Memory(">"), p.Inbox(">"), UserInfo,
			// Token deltas of its tenant's sessions (the model gateway
			// publishes them as the caller): live hints, never stored.
			events.TenantDeltaWildcard(p.Tenant),
		}},
		Subscribe: Subjects{Allow: []string{
			p.ReplyPrefix() + ".>", events.TenantLiveWildcard(p.Tenant), events.TenantDeltaWildcard(p.Tenant),
		}},
	}
}

// Stream and bucket names as JetStream sees them.
var (
	streamSessions = events.StreamSessions
	kvStreams      = []string{"KV_" + events.BucketSnapshots, "KV_" + events.BucketSessions, "KV_" + events.BucketTools}
	blobStream     = "OBJ_" + events.BucketBlobs
	// readable are the streams every role may read, with consumers of its
	// own. The inbox is not among them: it is a work queue, where an ack
	// removes a proposal, so only the ledger consumes it; others may look.
	readable = slices.Concat([]string{events.StreamSessions, events.StreamSigs, events.StreamRejects, events.StreamDead, memoryapi.Stream}, kvStreams, []string{blobStream})
)

// durables are the durable consumers on the sessions stream, by owner. Each
// must equal the service's Durable constant (a test in each service checks).
// A role may create, read from and ack only its own; every other role is
// denied them by name, so a client cannot take over a worker's queue.
var durables = map[Role][]string{
	RoleSelector:    {"selector"},
	RoleAgentWorker: {"agent-worker"},
	RoleToolRunner:  {"tool-runner", "mcp-servers"},
	// The memory service serves the remember tool (toolserver.Durable).
	RoleMemory: {"tool-remember"},
}

// TimersDurable is the selector's consumer of fired timers on RATH_TIMERS
// (services/selector/internal/timer.Consumer).
const TimersDurable = "timers"

// Durables returns the durable consumers the role owns on the sessions stream.
func Durables(r Role) []string { return slices.Clone(durables[r]) }

const (
	jsAPI   = "$JS.API."
	inboxes = "_INBOX.>"
)

// ledger may write every Rath stream and bucket and manage them, but not
// delete a stream: only an operator does that.
func ledger() Permissions {
	return Permissions{
		Publish: Subjects{
			Allow: []string{
				events.SessionsWildcard, events.LiveWildcard, events.RejectsWildcard, events.SigsWildcard, UserInfo,
				jsAPI + ">", "$JS.ACK.>", "$JS.FC.>", "$KV.>", "$O.>",
			},
			Deny: []string{jsAPI + "STREAM.DELETE.>"},
		},
		Subscribe: Subjects{Allow: []string{"rath.ledger.>", inboxes}},
		Respond:   true,
	}
}

// worker is a service other than the ledger: it reads every stream, asks the
// ledger (and memory) to write under its own name, uses its own durable
// consumers, and writes only what it owns outside the session log.
func worker(r Role) Permissions {
	// Listing streams and consumers reads names and configurations only.
	me := r.Principal()
	pub := []string{me.Ledger(">"), me.Memory(">"), me.Inbox(">"), UserInfo, jsAPI + "INFO", jsAPI + "STREAM.NAMES", jsAPI + "STREAM.LIST", "$JS.FC.>"}
	sub := []string{inboxes}
	for _, s := range readable {
		pub = append(pub,
			jsAPI+"STREAM.INFO."+s,
			jsAPI+"STREAM.MSG.GET."+s,
			jsAPI+"DIRECT.GET."+s, jsAPI+"DIRECT.GET."+s+".>",
			// Ephemeral (ordered) consumers for reads; durables of other
			// roles are denied below.
			jsAPI+"CONSUMER.CREATE."+s, jsAPI+"CONSUMER.CREATE."+s+".>",
			jsAPI+"CONSUMER.INFO."+s+".*",
			jsAPI+"CONSUMER.NAMES."+s, jsAPI+"CONSUMER.LIST."+s,
			jsAPI+"CONSUMER.MSG.NEXT."+s+".*",
			jsAPI+"CONSUMER.DELETE."+s+".*",
			// Acks of those consumers (nats stream view acks what it shows).
			"$JS.ACK."+s+".>",
		)
	}
	pub = append(pub,
		jsAPI+"STREAM.INFO."+events.StreamInbox,
		jsAPI+"STREAM.MSG.GET."+events.StreamInbox,
		jsAPI+"DIRECT.GET."+events.StreamInbox, jsAPI+"DIRECT.GET."+events.StreamInbox+".>")
	if len(durables[r]) > 0 {
		pub = append(pub, events.DeadWildcard)
	}
	var deny []string
	for _, owner := range Roles() {
		if owner == r {
			continue
		}
		for _, d := range durables[owner] {
			deny = append(deny, consumerAPI(streamSessions, d)...)
		}
	}
	respond := false
	switch r {
	case RoleSelector:
		// Durable timers: set them, and record the fired ones through the
		// one consumer of RATH_TIMERS (a work queue). No other role may
		// publish there: a schedule chooses what fires.
		pub = append(pub, events.TimersSetWildcard,
			jsAPI+"STREAM.INFO."+events.StreamTimers, jsAPI+"CONSUMER.INFO."+events.StreamTimers+"."+TimersDurable)
		pub = append(pub, consumerAPI(events.StreamTimers, TimersDurable)...)
		// Served routers (ADR 0029): the selector asks them; no other role
		// may, so a router's questions all come from the selector.
		pub = append(pub, events.RouteWildcard)
	case RoleAgentWorker:
		// Token deltas of the answers it streams (live, never stored).
		pub = append(pub, "$O."+events.BucketBlobs+".>", events.DeltaWildcard)
		// Served routers run with the agent worker's identity, as served
		// agents do: they take the selector's questions and answer them.
		sub = append(sub, events.RouteWildcard)
		// Served agents hand their answers to the agent worker under this
		// identity's name (pkg/agentapi); the worker answers every name's
		// requests and refuses all but this one. No other role may ask.
		pub = append(pub, me.Agent(">"))
		sub = append(sub, events.AgentWildcard)
		respond = true
	case RoleToolRunner:
		// Tool runners register tools, store tool output, and hand calls
		// over to each other; custom tool servers use this role too.
		pub = append(pub, "$KV."+events.BucketTools+".>", "$O."+events.BucketBlobs+".>", "rath.toolrunner.>")
		sub = append(sub, "rath.toolrunner.>")
		respond = true
	case RoleMemory:
		// Memory items; and the remember tool, served like a custom tool.
		pub = append(pub, memoryapi.ItemsWildcard, "$KV."+events.BucketTools+".>", "$O."+events.BucketBlobs+".>",
			jsAPI+"STREAM.CREATE."+memoryapi.Stream, jsAPI+"STREAM.UPDATE."+memoryapi.Stream)
		sub = append(sub, "rath.memory.>")
		respond = true
	}
	return Permissions{
		Publish:   Subjects{Allow: dedupe(pub), Deny: deny},
		Subscribe: Subjects{Allow: sub},
		Respond:   respond,
	}
}

// consumerAPI lists the subjects that create, update, read from, ack or
// delete the named consumer.
func consumerAPI(stream, name string) []string {
	return []string{
		jsAPI + "CONSUMER.CREATE." + stream + "." + name,
		jsAPI + "CONSUMER.CREATE." + stream + "." + name + ".>",
		jsAPI + "CONSUMER.DURABLE.CREATE." + stream + "." + name,
		jsAPI + "CONSUMER.DELETE." + stream + "." + name,
		jsAPI + "CONSUMER.MSG.NEXT." + stream + "." + name,
		"$JS.ACK." + stream + "." + name + ".>",
	}
}

func dedupe(s []string) []string {
	out := make([]string, 0, len(s))
	for _, v := range s {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// AllDurables returns every role's durable consumers on the sessions
// stream, in the order of Roles.
func AllDurables() []string {
	var all []string
	for _, r := range Roles() {
		all = append(all, durables[r]...)
	}
	return all
}
