package session

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/openrath/rath/pkg/events"
)

// A fork that names a workflow runs it from there on; one that names none
// runs its parent's.
func TestForkCarriesWorkflow(t *testing.T) {
	ev := func(session string, seq uint64, data any) events.Stored {
		k, _ := events.KindOf(data)
		raw, err := json.Marshal(data)
		if err != nil {
			t.Fatal(err)
		}
		return events.Stored{ID: events.NewID(), Type: k.Type, Session: session, Seq: seq, Time: time.Unix(int64(seq), 0), Data: raw}
	}
	start := ev("p", 1, &events.SessionStarted{Workflow: "old", WorkflowHash: "h-old", WorkflowRef: "sha256:old", Task: "t"})
	for _, c := range []struct {
		name string
		fork events.SessionForked
		want [3]string
	}{
		{"inherits", events.SessionForked{Parent: "p", AtSeq: 1}, [3]string{"old", "h-old", "sha256:old"}},
		{"replaces", events.SessionForked{Parent: "p", AtSeq: 1, Workflow: "new", WorkflowHash: "h-new", WorkflowRef: "sha256:new"}, [3]string{"new", "h-new", "sha256:new"}},
		// Only a reference replaces it: a name alone names no bundle to run.
		{"name alone", events.SessionForked{Parent: "p", AtSeq: 1, Workflow: "new"}, [3]string{"old", "h-old", "sha256:old"}},
	} {
		st := &State{}
		Apply(st, start)
		Apply(st, ev("f", 2, &c.fork))
		if got := [3]string{st.Workflow, st.WorkflowHash, st.WorkflowRef}; got != c.want {
			t.Errorf("%s: workflow %v, want %v", c.name, got, c.want)
		}
		if st.Task != "t" {
			t.Errorf("%s: task %q, want the parent's", c.name, st.Task)
		}
	}
}
