package client

import (
	"context"
	"fmt"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/memoryapi"
)

// Memory is the client of the memory service (rath.memory.*): versioned
// memory items with provenance, recall, retraction, and the provenance
// questions. Writes, recalls and retractions are recorded in the session
// named by the request. Like the ledger operations, requests are retried
// on transient failures; the write operations carry a request ID chosen
// once, so a retry is applied once.
type Memory struct{ c *Client }

// Memory returns the memory service's client on the same connection.
func (c *Client) Memory() *Memory { return &Memory{c: c} }

// Add writes a memory item (a new one, or a new version of req.ItemID).
func (m *Memory) Add(ctx context.Context, req memoryapi.AddRequest) (memoryapi.WriteReply, error) {
	if req.RequestID == "" {
		req.RequestID = events.NewID()
	}
	var r memoryapi.WriteReply
	if err := m.c.request(ctx, m.c.as.Memory(memoryapi.ReqAdd), req, &r); err != nil {
		return r, fmt.Errorf("memory add in session %s: %w", req.Session, err)
	}
	return r, nil
}

// Recall returns the items that best match req.Query for req.Session and
// records the recall in that session (rath.memory.recalled).
func (m *Memory) Recall(ctx context.Context, req memoryapi.RecallRequest) (memoryapi.RecallReply, error) {
	if req.RequestID == "" {
		req.RequestID = events.NewID()
	}
	var r memoryapi.RecallReply
	if err := m.c.request(ctx, m.c.as.Memory(memoryapi.ReqRecall), req, &r); err != nil {
		return r, fmt.Errorf("memory recall for session %s: %w", req.Session, err)
	}
	return r, nil
}

// Search ranks items like Recall without recording anything: for people
// looking, not for agents.
func (m *Memory) Search(ctx context.Context, req memoryapi.SearchRequest) (memoryapi.RecallReply, error) {
	var r memoryapi.RecallReply
	if err := m.c.request(ctx, m.c.as.Memory(memoryapi.ReqSearch), req, &r); err != nil {
		return r, fmt.Errorf("memory search: %w", err)
	}
	return r, nil
}

// Show returns an item as recall sees it now.
func (m *Memory) Show(ctx context.Context, itemID string) (memoryapi.Item, error) {
	var r memoryapi.Item
	if err := m.c.request(ctx, m.c.as.Memory(memoryapi.ReqShow), memoryapi.ItemRequest{ItemID: itemID}, &r); err != nil {
		return r, fmt.Errorf("memory show %s: %w", itemID, err)
	}
	return r, nil
}

// History returns every version and retraction of an item, oldest first.
func (m *Memory) History(ctx context.Context, itemID string) (memoryapi.HistoryReply, error) {
	var r memoryapi.HistoryReply
	if err := m.c.request(ctx, m.c.as.Memory(memoryapi.ReqHistory), memoryapi.ItemRequest{ItemID: itemID}, &r); err != nil {
		return r, fmt.Errorf("memory history %s: %w", itemID, err)
	}
	return r, nil
}

// Retract withdraws an item (req.Version 0) or one version of it.
func (m *Memory) Retract(ctx context.Context, req memoryapi.RetractRequest) (memoryapi.RetractReply, error) {
	if req.RequestID == "" {
		req.RequestID = events.NewID()
	}
	var r memoryapi.RetractReply
	if err := m.c.request(ctx, m.c.as.Memory(memoryapi.ReqRetract), req, &r); err != nil {
		return r, fmt.Errorf("memory retract %s: %w", req.ItemID, err)
	}
	return r, nil
}

// Restore writes a new version of an item with an earlier version's content.
func (m *Memory) Restore(ctx context.Context, req memoryapi.RestoreRequest) (memoryapi.WriteReply, error) {
	if req.RequestID == "" {
		req.RequestID = events.NewID()
	}
	var r memoryapi.WriteReply
	if err := m.c.request(ctx, m.c.as.Memory(memoryapi.ReqRestore), req, &r); err != nil {
		return r, fmt.Errorf("memory restore %s version %d: %w", req.ItemID, req.Version, err)
	}
	return r, nil
}

// Readers returns the sessions that read an item (through their own
// recalls, a fork ancestor's or a merge's).
func (m *Memory) Readers(ctx context.Context, itemID string) (memoryapi.ReadersReply, error) {
	var r memoryapi.ReadersReply
	if err := m.c.request(ctx, m.c.as.Memory(memoryapi.ReqReaders), memoryapi.ItemRequest{ItemID: itemID}, &r); err != nil {
		return r, fmt.Errorf("memory readers of %s: %w", itemID, err)
	}
	return r, nil
}

// Justify returns what justified item req.ItemID's version req.Version, or
// all its versions (Version 0).
func (m *Memory) Justify(ctx context.Context, req memoryapi.JustifyRequest) (memoryapi.JustifyReply, error) {
	var r memoryapi.JustifyReply
	if err := m.c.request(ctx, m.c.as.Memory(memoryapi.ReqJustify), req, &r); err != nil {
		return r, fmt.Errorf("memory justify %s: %w", req.ItemID, err)
	}
	return r, nil
}

// Present returns the items present in session req.Session at sequence
// req.At (0: its head), and why.
func (m *Memory) Present(ctx context.Context, req memoryapi.PresentRequest) (memoryapi.PresentReply, error) {
	var r memoryapi.PresentReply
	if err := m.c.request(ctx, m.c.as.Memory(memoryapi.ReqPresent), req, &r); err != nil {
		return r, fmt.Errorf("memory present in %s at %d: %w", req.Session, req.At, err)
	}
	return r, nil
}
