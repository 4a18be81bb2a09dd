// Package lru keeps values by key within a bound in approximate bytes,
// dropping the least recently used first. The workers' caches of folded
// states (internal/fold) and of model contexts (the agent worker) use it.
package lru

import (
	"container/list"
	"sync"
)

// Sized is a set of values bounded by the bytes their holders report. The
// value just accounted for is never dropped by its own accounting; a value
// dropped while a caller holds it stays that caller's until it is done. It
// is safe for concurrent use.
type Sized[K comparable, V any] struct {
	max int64

	mu      sync.Mutex
	entries map[K]*list.Element // of *Slot[K, V], most recently used first
	order   *list.List
	bytes   int64
}

// Slot is a value's place in a Sized.
type Slot[K comparable, V any] struct {
	Key   K
	Value V

	el      *list.Element
	counted int64 // what the cache's bytes hold for it (under its mu)
	dropped bool  // no longer in the cache (under its mu)
}

// New returns an empty Sized bounded to max bytes.
func New[K comparable, V any](max int64) *Sized[K, V] {
	return &Sized[K, V]{max: max, entries: map[K]*list.Element{}, order: list.New()}
}

// Get returns the slot of key as the most recently used, holding a value
// made by create if the key had none.
func (c *Sized[K, V]) Get(key K, create func(K) V) *Slot[K, V] {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[key]; ok {
		c.order.MoveToFront(el)
		return el.Value.(*Slot[K, V])
	}
	s := &Slot[K, V]{Key: key, Value: create(key)}
	s.el = c.order.PushFront(s)
	c.entries[key] = s.el
	return s
}

// Lookup returns the slot of key as the most recently used, if the key has
// one.
func (c *Sized[K, V]) Lookup(key K) (*Slot[K, V], bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[key]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*Slot[K, V]), true
}

// Account records that s holds size bytes now and drops the least recently
// used slots beyond the bound, never s. A dropped slot is not counted again.
func (c *Sized[K, V]) Account(s *Slot[K, V], size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.dropped {
		return
	}
	c.bytes += size - s.counted
	s.counted = size
	for c.bytes > c.max {
		old := c.order.Back().Value.(*Slot[K, V])
		if old == s {
			break
		}
		c.drop(old)
	}
}

// Drop removes s from the cache now.
func (c *Sized[K, V]) Drop(s *Slot[K, V]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !s.dropped {
		c.drop(s)
	}
}

func (c *Sized[K, V]) drop(s *Slot[K, V]) {
	c.order.Remove(s.el)
	delete(c.entries, s.Key)
	c.bytes -= s.counted
	s.counted, s.dropped = 0, true
}

// Len and Bytes are how many values the cache holds and their bytes.
func (c *Sized[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// Bytes is the sum of the sizes accounted for the values held.
func (c *Sized[K, V]) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}
