package consume

import (
	"testing"
	"unsafe"
)

// The hand-offs' memory of sessions keys on copies of their IDs, not on
// the caller's memory (an ID parsed from a message is a substring of it):
// overwritten afterwards, the session is still found under its ID.
func TestHandoffsKeepNoCallersID(t *testing.T) {
	h := newHandoffs()
	id := []byte("s-seen")
	h.saw(unsafe.String(&id[0], len(id)), 3)
	copy(id, "xxxxxx")
	h.saw("s-seen", 2)
	if got, ok := h.seen["s-seen"]; !ok || got != 3 || len(h.seen) != 1 {
		t.Errorf("seen = %v after the caller's ID was overwritten, want s-seen at 3 alone", h.seen)
	}
}
