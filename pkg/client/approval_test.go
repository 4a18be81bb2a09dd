package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
	"github.com/openrath/rath/pkg/session"
)

// Pending joins each waiting approval with its gated call, also when more
// calls are in flight than the overview keeps, and Reject needs a reason.
func TestPendingAndReject(t *testing.T) {
	_, nc := natstest.Start(t)
	testrig.Ledger(t, nc.ConnectedUrl())
	ctx := context.Background()
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(ctx, "p", events.SessionStarted{Task: "t"}); err != nil {
		t.Fatal(err)
	}
	for i := range session.MaxOpen + 1 {
		if _, err := c.Emit(ctx, "p", &events.ToolRequested{CallID: fmt.Sprintf("c%d", i), Tool: "read_file"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []any{
		&events.ApprovalRequested{ApprovalID: "ap-1", Action: "git push", Approver: "maintainers", CallID: "push", Tool: "run", Gate: "g"},
		&events.ToolRequested{CallID: "push", Tool: "run", Agent: "coder", Arguments: json.RawMessage(`{"command":["git","push"]}`), ApprovalID: "ap-1"},
	} {
		if _, err := c.Emit(ctx, "p", d); err != nil {
			t.Fatal(err)
		}
	}
	pending, err := c.Pending(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 1 || pending[0].CallID != "push" || pending[0].Agent != "coder" || string(pending[0].Arguments) != `{"command":["git","push"]}` ||
		pending[0].Approver != "maintainers" || pending[0].Session != "p" {
		t.Fatalf("pending %+v", pending)
	}
	if _, err := c.Reject(ctx, "p", "ap-1", ""); !errors.Is(err, client.ErrNoReason) {
		t.Fatalf("reject without a reason: %v", err)
	}
	if _, err := c.Reject(ctx, "p", "ap-1", "no"); err != nil {
		t.Fatal(err)
	}
	if pending, err := c.Pending(ctx, "p"); err != nil || len(pending) != 0 {
		t.Fatalf("after the rejection: %+v %v", pending, err)
	}
}
