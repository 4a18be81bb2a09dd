package ledger

import (
	"fmt"
	"reflect"
	"testing"

	api "github.com/openrath/rath/pkg/ledgerapi"
)

// An entry keeps the last recentKeep acks it gave, each whole again when a
// retry asks for it (the session filled in), the latest for an ID given
// twice, and none older.
func TestRecentAcks(t *testing.T) {
	e := &entry{id: "s-recent"}
	ack := func(i int) api.Ack {
		return api.Ack{ID: fmt.Sprintf("ev-%d", i), Session: e.id, Seq: uint64(i), Hash: fmt.Sprintf("h%d", i),
			Sig: fmt.Sprintf("sig%d", i), StreamSeq: uint64(1000 + i)}
	}
	n := recentKeep + 6
	for i := 1; i <= n; i++ {
		e.remember(ack(i))
	}
	for i := 1; i <= n; i++ {
		got, ok := e.lately(ack(i).ID)
		if kept := i > n-recentKeep; ok != kept {
			t.Fatalf("ack %d kept = %v, want %v", i, ok, kept)
		}
		if ok && !reflect.DeepEqual(got, ack(i)) {
			t.Errorf("ack %d = %+v, want %+v", i, got, ack(i))
		}
	}
	again := ack(n)
	again.Seq, again.StreamSeq = 999, 9999
	e.remember(again)
	if got, _ := e.lately(again.ID); !reflect.DeepEqual(got, again) {
		t.Errorf("an ID given twice answers %+v, want the latest %+v", got, again)
	}
	if len(e.recent) != recentKeep {
		t.Errorf("%d acks kept, want %d", len(e.recent), recentKeep)
	}
}
