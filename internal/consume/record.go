package consume

import (
	"context"
	"fmt"

	"github.com/openrath/rath/internal/answer"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// RecordInSession is the usual Failure: it appends rath.handler.failed to the
// event's session through the ledger. Its event ID is derived from the
// handler and the event, so recording twice stores it once. A session that
// refuses it (closed, say) leaves the dead letter as the only record. Its
// causation and correlation follow the rule of every answer (internal/answer).
func RecordInSession(c *client.Client) Failure {
	return func(ctx context.Context, ev events.Stored, f events.HandlerFailed) error {
		// The ID keeps its documented derivation (handler.failed, handler,
		// event ID), older than the answer's (handler, event ID, what).
		_, err := c.Emit(ctx, ev.Session, &f, append(answer.To(ev, f.Handler, "").Links(),
			events.WithID(events.DerivedID("handler.failed", f.Handler, f.EventID)))...)
		if err != nil && api.Permanent(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("record failure of %s in %s: %w", f.EventID, ev.Session, err)
		}
		return nil
	}
}
