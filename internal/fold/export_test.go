package fold

// Hold takes session id's entry as a caller does, until release: what
// Observe meets while a handler reads the session.
func (c *Cache) Hold(id string) (release func()) {
	slot := c.entries.Get(id, newEntry)
	slot.Value.mu.Lock()
	return slot.Value.mu.Unlock
}

// Tail returns how many events of session id the cache holds read and not
// folded into the state it keeps behind the head.
func (c *Cache) Tail(id string) int {
	slot, ok := c.entries.Lookup(id)
	if !ok {
		return 0
	}
	slot.Value.mu.Lock()
	defer slot.Value.mu.Unlock()
	return len(slot.Value.tail)
}
