package events

import (
	"context"
	"fmt"
	"regexp"
	"strings"
)

// A Principal is who proposes an event or asks a question: a user of a
// tenant, or one of Rath's services. Its two names are tokens of every
// subject it may publish on (rath.ledger.<tenant>.<user>.<op>,
// rath.inbox.<tenant>.<user>.<session>, ...), and the server lets an identity
// publish only under its own, so a service reading the subject knows who
// asked without trusting the message (ADR 0015).
type Principal struct {
	Tenant string
	User   string
}

// ServiceTenant is the tenant token of Rath's own services and of operators:
// a principal of it may act on every tenant's sessions. No tenant can take
// this name.
const ServiceTenant = "rath"

// DefaultTenant is the tenant of rath up's client.nk, and of sessions
// stored before tenants existed.
const DefaultTenant = "default"

// TenantOrDefault is a stored tenant, or the default tenant for data stored
// before tenants existed (no tenant recorded).
func TenantOrDefault(tenant string) string {
	if tenant == "" {
		return DefaultTenant
	}
	return tenant
}

// DefaultClient is the principal of rath up's client.nk.
var DefaultClient = Principal{Tenant: DefaultTenant, User: "client"}

// Service returns the principal of one of Rath's services (or admin).
func Service(name string) Principal { return Principal{Tenant: ServiceTenant, User: name} }

// validName keeps a tenant or user name one subject token, one path segment,
// and readable in an actor string.
var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// ValidateTenant reports whether name can name a tenant.
func ValidateTenant(name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("invalid tenant %q: want 1-32 characters of a-z 0-9 _ -, starting with a letter or digit", name)
	}
	if name == ServiceTenant {
		return fmt.Errorf("invalid tenant %q: reserved for Rath's services", name)
	}
	return nil
}

// ValidateUser reports whether name can name a user of a tenant.
func ValidateUser(name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("invalid user %q: want 1-32 characters of a-z 0-9 _ -, starting with a letter or digit", name)
	}
	return nil
}

// Validate reports whether p is a usable principal: a valid user of a valid
// tenant, or a service.
func (p Principal) Validate() error {
	if p.Tenant != ServiceTenant {
		if err := ValidateTenant(p.Tenant); err != nil {
			return err
		}
	}
	return ValidateUser(p.User)
}

// IsService reports whether p is one of Rath's services or an operator,
// which act on every tenant.
func (p Principal) IsService() bool { return p.Tenant == ServiceTenant }

// String is the actor as the ledger records it: tenant/user.
func (p Principal) String() string { return p.Tenant + "/" + p.User }

// ParseActor parses an actor string (tenant/user).
func ParseActor(s string) (Principal, error) {
	t, u, ok := strings.Cut(s, "/")
	if !ok {
		return Principal{}, fmt.Errorf("invalid actor %q: want tenant/user", s)
	}
	p := Principal{Tenant: t, User: u}
	if err := p.Validate(); err != nil {
		return Principal{}, fmt.Errorf("invalid actor %q: %w", s, err)
	}
	return p, nil
}

// Ledger returns the subject on which p asks the ledger for op (one of the
// Op* names).
func (p Principal) Ledger(op string) string { return ledgerPrefix + p.Tenant + "." + p.User + "." + op }

// Memory returns the subject on which p asks the memory service for op.
func (p Principal) Memory(op string) string { return memoryPrefix + p.Tenant + "." + p.User + "." + op }

// Agent returns the subject on which p asks the agent worker for op (one
// of pkg/agentapi's Req* names): a served agent's turn and its answer.
func (p Principal) Agent(op string) string { return agentPrefix + p.Tenant + "." + p.User + "." + op }

// Inbox returns the subject on which p proposes an event for a session
// (empty: a start without a chosen ID).
func (p Principal) Inbox(sessionID string) string {
	if sessionID == "" {
		sessionID = inboxNew
	}
	return inboxPrefix + p.Tenant + "." + p.User + "." + sessionID
}

// ReplyPrefix is the prefix of p's reply subjects (nats.CustomInboxPrefix):
// the server lets an identity subscribe to its own replies only, so no one
// reads the answers another was given.
func (p Principal) ReplyPrefix() string { return "_INBOX." + p.Tenant + "." + p.User }

// ParseRequest splits a request subject of prefix (rath.ledger. or
// rath.memory.) into its principal and operation.
func ParseRequest(subject, prefix string) (Principal, string, error) {
	rest, ok := strings.CutPrefix(subject, prefix)
	if !ok {
		return Principal{}, "", fmt.Errorf("subject %q is not under %s", subject, prefix)
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 {
		return Principal{}, "", fmt.Errorf("subject %q: want %s<tenant>.<user>.<operation>", subject, prefix)
	}
	p := Principal{Tenant: parts[0], User: parts[1]}
	if err := p.Validate(); err != nil {
		return Principal{}, "", fmt.Errorf("subject %q: %w", subject, err)
	}
	return p, parts[2], nil
}

// ParseInbox splits an inbox subject into the proposing principal and the
// session it names ("" for rath.inbox.<tenant>.<user>.new). A subject whose
// principal tokens are valid but whose rest is not a session returns the
// principal with the error, so that the refusal is filed under its tenant.
func ParseInbox(subject string) (Principal, string, error) {
	rest, ok := strings.CutPrefix(subject, inboxPrefix)
	if !ok {
		return Principal{}, "", fmt.Errorf("subject %q is not an inbox subject", subject)
	}
	parts := strings.Split(rest, ".")
	if len(parts) < 3 {
		return Principal{}, "", fmt.Errorf("inbox subject %q: want %s<tenant>.<user>.<session>", subject, inboxPrefix)
	}
	p := Principal{Tenant: parts[0], User: parts[1]}
	if err := p.Validate(); err != nil {
		return Principal{}, "", fmt.Errorf("inbox subject %q: %w", subject, err)
	}
	if len(parts) != 3 {
		return p, "", fmt.Errorf("inbox subject %q: want %s<tenant>.<user>.<session>", subject, inboxPrefix)
	}
	if parts[2] == inboxNew {
		return p, "", nil
	}
	if err := ValidateSessionID(parts[2]); err != nil {
		return p, "", fmt.Errorf("inbox subject %q: %w", subject, err)
	}
	return p, parts[2], nil
}

type principalKey struct{}

// WithPrincipal returns ctx carrying who asked, for a service handling a
// request on that principal's subject.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns who asked, if ctx carries it.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}
