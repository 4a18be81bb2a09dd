package lru_test

import (
	"testing"

	"github.com/openrath/rath/internal/lru"
)

func TestSizedDropsLeastRecentlyUsedBeyondTheBound(t *testing.T) {
	c := lru.New[string, int](10)
	made := 0
	get := func(k string) *lru.Slot[string, int] {
		return c.Get(k, func(string) int { made++; return made })
	}
	a, b := get("a"), get("b")
	c.Account(a, 4)
	c.Account(b, 4)
	if get("a") != a || made != 2 {
		t.Fatal("a second Get made a new value")
	}
	// a was used last: c's 4 bytes push out b, the least recently used.
	d := get("c")
	c.Account(d, 4)
	if c.Len() != 2 || c.Bytes() != 8 {
		t.Fatalf("holds %d values, %d bytes; want 2 and 8", c.Len(), c.Bytes())
	}
	if get("b") == b {
		t.Fatal("b was not dropped")
	}
	// A dropped slot's accounting changes nothing.
	c.Account(b, 100)
	if c.Bytes() != 8 {
		t.Fatalf("a dropped slot was counted: %d bytes", c.Bytes())
	}
	// The slot accounted for is never dropped by its own size.
	big := get("big")
	c.Account(big, 50)
	if get("big") != big || c.Len() != 1 || c.Bytes() != 50 {
		t.Fatalf("the slot in use was dropped, or others kept: %d values, %d bytes", c.Len(), c.Bytes())
	}
	c.Drop(big)
	c.Drop(big)
	if c.Len() != 0 || c.Bytes() != 0 {
		t.Fatalf("after Drop: %d values, %d bytes", c.Len(), c.Bytes())
	}
}
