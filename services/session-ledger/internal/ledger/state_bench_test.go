package ledger_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
)

// BenchmarkClientState is client.State of a session of 500 and 5,000
// events (a chunk and a model call, turn after turn): ADR 0038's O5.
func BenchmarkClientState(b *testing.B) {
	for _, n := range []int{500, 5000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			ns, nc := natstest.Start(b)
			testrig.Ledger(b, ns.ClientURL())
			c, err := client.New(nc)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if _, err := c.Start(ctx, "long", events.SessionStarted{Task: "long"}); err != nil {
				b.Fatal(err)
			}
			for done := 1; done < n; {
				var evs []event.Event
				for ; done < n && len(evs) < 500; done++ {
					var data any = chunk(fmt.Sprint("turn ", done))
					if done%2 == 0 {
						data = usage(int64(done), 1)
					}
					ev, err := events.New("long", data)
					if err != nil {
						b.Fatal(err)
					}
					evs = append(evs, ev)
				}
				res, err := c.AppendBatch(ctx, evs)
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range res {
					if r.Err != nil {
						b.Fatal(r.Err)
					}
				}
			}
			b.ResetTimer()
			for b.Loop() {
				st, err := c.State(ctx, "long")
				if err != nil || st.Seq != uint64(n) {
					b.Fatalf("state: %v", err)
				}
			}
		})
	}
}
