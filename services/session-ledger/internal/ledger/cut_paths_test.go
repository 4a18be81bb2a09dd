package ledger_test

import (
	"context"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Every way of appending refuses a session whose tail was cut as damaged,
// naming the lost range, and stores nothing at the cut sequence: the
// single append (TestCutTailIsReportedAndNeverReused), the atomic one and
// the pipelined batch.
func TestCutTailRefusedOnEveryAppendPath(t *testing.T) {
	for _, tc := range []struct {
		name   string
		append func(r *rig, evs []event.Event) error
	}{
		{"atomic", func(r *rig, evs []event.Event) error {
			_, err := r.c.AppendAtomic(context.Background(), evs)
			return err
		}},
		{"batch", func(r *rig, evs []event.Event) error {
			res, err := r.c.AppendBatch(context.Background(), evs)
			if err != nil {
				return err
			}
			for _, x := range res {
				if x.Err != nil {
					return x.Err
				}
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.start(t, "s")
			r.emit(t, "s", chunk("two"))
			last := r.emit(t, "s", chunk("three"))
			headsRecorded(t, r)
			stream, err := r.store.JetStream().Stream(context.Background(), events.StreamSessions)
			if err != nil {
				t.Fatal(err)
			}
			if err := stream.DeleteMsg(context.Background(), last.StreamSeq); err != nil {
				t.Fatal(err)
			}
			err = tc.append(r, []event.Event{mustEvent(t, "s", chunk("after the cut")), mustEvent(t, "s", chunk("and again"))})
			wantCode(t, err, api.CodeDamaged)
			if !strings.Contains(err.Error(), "removed or lost") {
				t.Fatalf("refusal does not say events were lost: %v", err)
			}
			if got, err := r.c.Log(context.Background(), "s", client.Range{From: 1}); err != nil || len(got) != 2 {
				t.Fatalf("nothing may be stored at the cut sequence: %d events, %v", len(got), err)
			}
		})
	}
}
