package fold

// Hold takes session id's entry as a caller does, until release: what
// Observe meets while a handler reads the session.
func (c *Cache) Hold(id string) (release func()) {
	slot := c.entries.Get(id, newEntry)
	slot.Value.mu.Lock()
	return slot.Value.mu.Unlock
}
