package ledger

import (
	"context"
	"errors"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// Every request and inbox proposal arrives on a subject that names its
// principal (rath.ledger.<tenant>.<user>.<op>, rath.inbox.<tenant>.<user>.<session>),
// and the server lets an identity publish under its own name only. So the
// principal read from the subject is who asked: the ledger stamps it on
// every event it stores and keeps each tenant to its own sessions (ADR 0015).

// self is the principal of what the ledger does on its own account (and of
// calls made without a request, in tests).
var self = events.Service("ledger")

// withPrincipal returns ctx carrying who asked.
func withPrincipal(ctx context.Context, p events.Principal) context.Context {
	return events.WithPrincipal(ctx, p)
}

// principalOf returns who asked, or the ledger itself.
func principalOf(ctx context.Context) events.Principal {
	if p, ok := events.PrincipalFrom(ctx); ok {
		return p
	}
	return self
}

// admit refuses a principal of another tenant than the session's, exactly
// as if the session did not exist, so that a tenant learns nothing of
// another's sessions. Services act on every tenant. A start or fork naming
// an ID another tenant holds is refused as taken: session IDs are unique
// across tenants.
func admit(ctx context.Context, st *session.State, id, typ string) error {
	if st == nil {
		return nil
	}
	return admitTenant(ctx, tenantOf(st), id, typ)
}

// admitTenant is admit for a session of tenant.
func admitTenant(ctx context.Context, tenant, id, typ string) error {
	p := principalOf(ctx)
	if p.IsService() || tenant == p.Tenant {
		return nil
	}
	if typ == events.TypeSessionStarted || typ == events.TypeSessionForked {
		return api.Errorf(api.CodeExists, "session ID %s is taken: choose another", id)
	}
	return notFound(id)
}

// notFound is the refusal of a session that does not exist, word for word
// the one an append to a missing session gets (transition).
func notFound(id string) error {
	return api.Errorf(api.CodeNotFound, "session %s does not exist: start it with a %s event", id, events.TypeSessionStarted)
}

// tenantOf is the tenant of a folded session.
func tenantOf(st *session.State) string { return events.TenantOrDefault(st.Tenant) }

// stamp sets who proposed ev, and on a session's first event the tenant it
// belongs to: the proposer's, or for a fork its parent's (parentTenant). A
// proposed value of either is discarded, except that a service may start a
// session for a tenant it names. A proposed on-behalf principal (rathfor)
// is kept only from a service, and only if it is a valid actor: a service
// such as the memory service proposes events for whoever asked it, which
// only a service can be trusted to say.
func stamp(ctx context.Context, ev *event.Event, parentTenant string) {
	p := principalOf(ctx)
	ev.SetExtension(events.ExtActor, p.String())
	onBehalf := events.OnBehalf(*ev)
	ev.SetExtension(events.ExtOnBehalf, nil)
	if p.IsService() && onBehalf != "" {
		if _, err := events.ParseActor(onBehalf); err == nil {
			ev.SetExtension(events.ExtOnBehalf, onBehalf)
		}
	}
	proposed := events.Tenant(*ev)
	ev.SetExtension(events.ExtTenant, nil)
	switch {
	case ev.Type() == events.TypeSessionForked:
		ev.SetExtension(events.ExtTenant, parentTenant)
	case ev.Type() != events.TypeSessionStarted:
	case !p.IsService():
		ev.SetExtension(events.ExtTenant, p.Tenant)
	case events.ValidateTenant(proposed) == nil:
		ev.SetExtension(events.ExtTenant, proposed)
	default:
		ev.SetExtension(events.ExtTenant, events.DefaultTenant)
	}
}

// tenantFor is the tenant whose subjects an event of a session goes on:
// the session's, or for its first event the one stamp set.
func tenantFor(ev *event.Event, st *session.State) string {
	if st != nil && ev.Type() != events.TypeSessionForked {
		return tenantOf(st)
	}
	return events.TenantOrDefault(events.Tenant(*ev))
}

// readable checks that the asker may read session id: a session of another
// tenant does not exist for it. The tenant comes from the cached head, else
// the session index, else the head loaded now; a damaged session stays
// readable by its tenant through the index.
func (l *Ledger) readable(ctx context.Context, id string) error {
	p := principalOf(ctx)
	if p.IsService() {
		return nil
	}
	if err := events.ValidateSessionID(id); err != nil {
		return api.Errorf(api.CodeInvalidSession, "%v", err)
	}
	if tenant, ok := l.cachedTenant(id); ok {
		return admitTenant(ctx, tenant, id, "")
	}
	rec, err := l.store.GetRecord(ctx, id)
	if err == nil {
		return admitTenant(ctx, events.TenantOrDefault(rec.Tenant), id, "")
	}
	if !errors.Is(err, eventstore.ErrNotFound) {
		return unavailable(err)
	}
	e := l.entry(id)
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.loaded {
		if err := l.load(ctx, e); err != nil {
			return unavailable(err)
		}
	}
	if e.state == nil {
		return notFound(id)
	}
	return admit(ctx, e.state, id, "")
}

// cachedTenant is the tenant of a session whose head this ledger holds.
func (l *Ledger) cachedTenant(id string) (string, bool) {
	e := l.entry(id)
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.loaded || e.state == nil {
		return "", false
	}
	return tenantOf(e.state), true
}
