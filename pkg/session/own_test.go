package session_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// A stored event's attributes are substrings of its body (ParseStored): the
// fold keeps copies, so a state folded from bodies holds none of them, and
// a cache of idle sessions does not keep every message they were read from.
// Proven by overwriting the bodies after the fold: the state must not
// change.
func TestStateKeepsNoBody(t *testing.T) {
	body := func(seq uint64, id, typ, actor, cause, data string) []byte {
		return fmt.Appendf(nil, `{"%s":"%s","data":%s,"id":"%s","%s":"%s","%s":"hash-%d","%s":%d,"%s":"acme","source":"rath/test","subject":"s-own","time":"2026-12-03T08:00:0%dZ","type":"%s"}`,
			events.ExtCausation, cause, data, id, events.ExtActor, actor, events.ExtHash, seq, events.ExtSeq, seq, events.ExtTenant, seq, typ)
	}
	bodies := [][]byte{
		body(1, "ev-start", events.TypeSessionStarted, "acme/alice", "", `{"task":"t"}`),
		body(2, "ev-decided", events.TypeSelectorDecided, "rath/selector", "ev-start", `{"rule":"r","route":"agent:a","turn_id":"turn-1"}`),
		body(3, "ev-paused", events.TypeSessionPaused, "acme/bob", "", `{}`),
	}
	st := &session.State{}
	for _, b := range bodies {
		ev, err := events.ParseStored(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		session.Apply(st, ev)
	}
	if st.StatusBy != "acme/bob" || st.LastID != "ev-paused" || len(st.Decisions) != 1 || st.Decisions[0].Cause != "ev-start" {
		t.Fatalf("folded state %+v: not the events folded", st)
	}
	want, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bodies {
		for i := range b {
			b[i] = 'x'
		}
	}
	got, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("the state changed with the bodies it was folded from:\nbefore %s\nafter  %s", want, got)
	}
}
