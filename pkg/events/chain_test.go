package events_test

import (
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
)

func TestSealIsVerifiableAndResealable(t *testing.T) {
	ev, err := events.New("s1", &events.ChunkAppended{Role: events.RoleUser, Content: "héllo <b> & \u2028"})
	if err != nil {
		t.Fatal(err)
	}
	for i, prev := range []string{"", "aa", "bb"} { // a retry seals the same event again
		body, hash, err := events.Seal(&ev, uint64(i+1), prev, testKey)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(string(body), `"rathhash"`) != 1 {
			t.Fatalf("seal %d: body carries %d hashes: %s", i, strings.Count(string(body), `"rathhash"`), body)
		}
		got, err := events.ComputeHash(body)
		if err != nil || got != hash {
			t.Fatalf("seal %d: recomputed %s, sealed %s (%v)", i, got, hash, err)
		}
		st, err := events.ParseStored(body)
		if err != nil || st.Seq != uint64(i+1) || st.Prev != prev || st.Hash != hash {
			t.Fatalf("seal %d: stored %+v %v", i, st, err)
		}
	}
}

func TestComputeHashSeesEveryChange(t *testing.T) {
	ev, _ := events.New("s1", &events.ChunkAppended{Role: events.RoleUser, Content: "a"})
	body, hash, _ := events.Seal(&ev, 1, "", testKey)
	for _, edit := range []struct{ from, to string }{
		{`"content":"a"`, `"content":"b"`},
		{`"rathseq":1`, `"rathseq":2`},
		{`"subject":"s1"`, `"subject":"s2"`},
	} {
		altered := strings.Replace(string(body), edit.from, edit.to, 1)
		if altered == string(body) {
			t.Fatalf("edit %q not applied to %s", edit.from, body)
		}
		if got, _ := events.ComputeHash([]byte(altered)); got == hash {
			t.Fatalf("edit %q kept the hash", edit.from)
		}
	}
}
