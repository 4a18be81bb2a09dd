package memory

import (
	"context"
	"errors"
	"fmt"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/memoryapi"
)

// Every request arrives on a subject that names its principal
// (rath.memory.<tenant>.<user>.<request>), and the server lets an identity
// publish under its own name only, so the principal dispatch puts in the
// request's context is who asked (ADR 0015). An item belongs to the tenant
// of the session its first version was written for; a tenant's principal
// sees and changes only its tenant's items and sessions, and another
// tenant's do not exist for it. Rath's services act on every tenant: for a
// request naming a session they act for the session's tenant.

// Self is the principal the memory service acts as: it appends memory
// events to sessions through the ledger under this name, and it is who
// asked for what it does on its own account (the remember tool, voids).
var Self = events.Service("memory-svc")

// anyTenant is the effective tenant of a service's request that names no
// session (search, show, history, ...): every tenant's items.
const anyTenant = ""

// asker is who asked: the request's principal, or the service itself for
// calls made without a request (the remember tool, served from a tool
// call the agent worker proposed).
func asker(ctx context.Context) events.Principal {
	if p, ok := events.PrincipalFrom(ctx); ok {
		return p
	}
	return Self
}

// askerTenant is the effective tenant of a request that names no session:
// the asker's, or every tenant for a service.
func askerTenant(ctx context.Context) string {
	p := asker(ctx)
	if p.IsService() {
		return anyTenant
	}
	return p.Tenant
}

// onBehalf are the options that make the ledger record whom an event the
// service appends was for (events.ExtOnBehalf): the principal of the
// request. The ledger stamps the service itself as the proposer. A call
// without a request (the remember tool, whose tool call the agent worker
// proposed) names no one: the service wrote on its own account.
func onBehalf(ctx context.Context) []events.Option {
	if p, ok := events.PrincipalFrom(ctx); ok {
		return []events.Option{events.WithOnBehalf(p)}
	}
	return nil
}

// sees reports whether a request acting for tenant (anyTenant: every one)
// may see an item of itemTenant.
func sees(tenant, itemTenant string) bool {
	return tenant == anyTenant || tenant == itemTenant
}

// sessionNotFound is the refusal of a session that does not exist, and of
// another tenant's: the two read alike, so a tenant learns nothing of
// another's sessions.
func sessionNotFound(id string) error {
	return memoryapi.Errorf(memoryapi.CodeSessionNotFound, "session %s does not exist", id)
}

// itemNotFound is the refusal of an item that does not exist, and of
// another tenant's.
func itemNotFound(id string) error {
	return memoryapi.Errorf(memoryapi.CodeItemNotFound, "no memory item %q", id)
}

// admitSession returns the tenant a request naming session id acts for:
// the session's. A tenant's principal naming another tenant's session is
// refused exactly as for a session that does not exist.
func (m *Memory) admitSession(ctx context.Context, id string) (string, error) {
	tenant, err := m.sessionTenant(ctx, id)
	if err != nil {
		return "", err
	}
	if p := asker(ctx); !p.IsService() && p.Tenant != tenant {
		return "", sessionNotFound(id)
	}
	return tenant, nil
}

// sessionTenant is the tenant of session id, which never changes: from the
// ledger's session index (a key-value read) when it holds the session,
// else from the session's folded state.
func (m *Memory) sessionTenant(ctx context.Context, id string) (string, error) {
	if m.index != nil {
		if rec, err := m.index.GetRecord(ctx, id); err == nil {
			return events.TenantOrDefault(rec.Tenant), nil
		}
	}
	st, err := m.state(ctx, id, 0)
	if errors.Is(err, api.ErrNotFound) {
		return "", sessionNotFound(id)
	}
	if err != nil {
		return "", fmt.Errorf("session %s: %w", id, err)
	}
	return events.TenantOrDefault(st.Tenant), nil
}

// visibleItem returns an item's view for a request acting for tenant; an
// item of another tenant does not exist for it.
func (m *Memory) visibleItem(tenant, itemID string) (memoryapi.Item, []memoryapi.Record, error) {
	it, recs, ok := m.items.Get(itemID)
	if !ok || !sees(tenant, it.Tenant) {
		return memoryapi.Item{}, nil, itemNotFound(itemID)
	}
	return it, recs, nil
}
