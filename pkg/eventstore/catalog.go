package eventstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Catalog is the session index held in memory: every session's record and
// the last recorded head (its sequence and when it was recorded), kept
// current by watching the index and heads buckets. Listing 100,000 sessions
// is then a filter and a sort of memory, not 200,000 reads of the buckets
// (Records). It may lag the buckets by the watch's delivery; the ledger's
// own appends are newer still (it overlays them).
type Catalog struct {
	mu    sync.RWMutex
	recs  map[string]Record
	revs  map[string]uint64 // the bucket revision of each record held
	heads map[string]catalogHead
	// forks counts each session's forks: the records held that name it
	// their parent.
	forks map[string]int
	stop  func()
	// lost is set when a watch ended before the catalog was stopped: it no
	// longer follows the buckets (OK).
	lost atomic.Bool
}

// OK reports whether the catalog still follows the buckets.
func (c *Catalog) OK() bool { return !c.lost.Load() }

type catalogHead struct {
	seq uint64
	at  time.Time
}

// Entry is one session of a catalog listing: its record with Seq the latest
// of the record's and the head's, and Active when it last changed.
type Entry struct {
	Record
	Active time.Time
}

// WatchCatalog loads the catalog and keeps it current until ctx ends or
// Stop. It returns once every record and head stored when it started is in.
func (s *Store) WatchCatalog(ctx context.Context) (*Catalog, error) {
	if s.heads == nil {
		return nil, errors.New("catalog: the store is attached, not opened by a ledger")
	}
	ctx, cancel := context.WithCancel(ctx)
	c := &Catalog{recs: make(map[string]Record), revs: make(map[string]uint64), heads: make(map[string]catalogHead), forks: make(map[string]int), stop: cancel}
	recs, err := s.index.Watch(ctx, recordPrefix+"*")
	if err != nil {
		cancel()
		return nil, fmt.Errorf("catalog: watch the index: %w", err)
	}
	heads, err := s.heads.WatchAll(ctx)
	if err != nil {
		cancel()
		_ = recs.Stop()
		return nil, fmt.Errorf("catalog: watch the heads: %w", err)
	}
	loaded := make(chan struct{}, 2)
	go c.follow(ctx, recs, loaded, c.putRecord)
	go c.follow(ctx, heads, loaded, c.putHead)
	for range 2 {
		select {
		case <-loaded:
		case <-ctx.Done():
			cancel()
			return nil, fmt.Errorf("catalog: %w", ctx.Err())
		}
	}
	// This store's own index writes go in at once (PutRecord): a session
	// it just started is listed without waiting for the watch.
	s.catalog.Store(c)
	return c, nil
}

// Stop ends the catalog's watches.
func (c *Catalog) Stop() { c.stop() }

// follow applies a watch's entries until ctx ends; loaded gets a value once
// the initial values are in (a nil entry marks their end).
func (c *Catalog) follow(ctx context.Context, w jetstream.KeyWatcher, loaded chan<- struct{}, put func(jetstream.KeyValueEntry)) {
	defer w.Stop()
	first := true
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() == nil {
					c.lost.Store(true)
				}
				return
			}
			if e == nil {
				if first {
					first = false
					loaded <- struct{}{}
				}
				continue
			}
			put(e)
		}
	}
}

func (c *Catalog) putRecord(e jetstream.KeyValueEntry) {
	id := strings.TrimPrefix(e.Key(), recordPrefix)
	if e.Operation() != jetstream.KeyValuePut {
		c.mu.Lock()
		if e.Revision() > c.revs[id] {
			c.forget(id)
			c.revs[id] = e.Revision()
		}
		c.mu.Unlock()
		return
	}
	var r Record
	if json.Unmarshal(e.Value(), &r) != nil || r.ID != id {
		return // not a record the ledger wrote; Records skips it the same way
	}
	c.apply(r, e.Revision())
}

// apply holds r, written at revision rev of the bucket, unless the catalog
// holds a later revision of the session's record already (the watch
// delivers a write this store applied directly, later).
func (c *Catalog) apply(r Record, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rev <= c.revs[r.ID] {
		return
	}
	c.forget(r.ID)
	r.Active, r.Forks = time.Time{}, 0
	c.recs[r.ID], c.revs[r.ID] = r, rev
	if r.Parent != "" {
		c.forks[r.Parent]++
	}
}

// forget drops the record held for id, and its count among its parent's
// forks. The caller holds c.mu.
func (c *Catalog) forget(id string) {
	old, ok := c.recs[id]
	if !ok {
		return
	}
	delete(c.recs, id)
	if old.Parent == "" {
		return
	}
	if c.forks[old.Parent]--; c.forks[old.Parent] <= 0 {
		delete(c.forks, old.Parent)
	}
}

func (c *Catalog) putHead(e jetstream.KeyValueEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(c.heads, e.Key())
		return
	}
	var h Head
	if json.Unmarshal(e.Value(), &h) != nil {
		return
	}
	c.heads[e.Key()] = catalogHead{seq: h.Seq, at: e.Created()}
}

// Len is how many sessions the catalog holds.
func (c *Catalog) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.recs)
}

// Orders of a listing.
const (
	ByCreated = "created" // oldest first (the default)
	ByActive  = "active"  // most recently changed first
)

// Query selects and orders a catalog listing.
type Query struct {
	Keep  func(Entry) bool // nil keeps every session
	Order string           // ByCreated or ByActive
	// After is the cursor of the last entry of the previous page (Cursor);
	// empty starts at the first.
	After string
	Limit int // 0: no limit
}

// List returns the entries q selects, in its order, from after q.After, at
// most q.Limit of them; the cursor of the next page (empty at the end); and
// how many entries q selects in all.
func (c *Catalog) List(q Query) (page []Entry, next string, total int, err error) {
	c.mu.RLock()
	all := make([]Entry, 0, len(c.recs))
	for id, r := range c.recs {
		e := Entry{Record: r, Active: r.Updated}
		e.Forks = c.forks[id]
		if h, ok := c.heads[id]; ok {
			e.Seq = max(e.Seq, h.seq)
			if h.at.After(e.Active) {
				e.Active = h.at
			}
		}
		if q.Keep == nil || q.Keep(e) {
			all = append(all, e)
		}
	}
	c.mu.RUnlock()
	return Page(all, Query{Order: q.Order, After: q.After, Limit: q.Limit})
}

// Page orders entries as q says (q.Keep is not applied) and returns the page
// after q.After, at most q.Limit long, with the next page's cursor and the
// number of entries. It sorts entries in place.
func Page(entries []Entry, q Query) (page []Entry, next string, total int, err error) {
	less := compareCreated
	switch q.Order {
	case "", ByCreated:
	case ByActive:
		less = compareActive
	default:
		return nil, "", 0, fmt.Errorf("order %q: want %s or %s", q.Order, ByCreated, ByActive)
	}
	var after *Entry
	if q.After != "" {
		e, err := parseCursor(q.After)
		if err != nil {
			return nil, "", 0, err
		}
		after = &e
	}
	slices.SortFunc(entries, less)
	start := 0
	if after != nil {
		// The first entry after the cursor's place: a session that changed
		// since the previous page may move in an active listing.
		start, _ = slices.BinarySearchFunc(entries, *after, func(e, t Entry) int {
			if less(e, t) <= 0 {
				return -1
			}
			return 1
		})
	}
	page = entries[start:]
	if q.Limit > 0 && len(page) > q.Limit {
		page = page[:q.Limit]
		next = cursor(page[len(page)-1])
	}
	return page, next, len(entries), nil
}

func compareCreated(a, b Entry) int {
	return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.ID, b.ID))
}

func compareActive(a, b Entry) int {
	return cmp.Or(b.Active.Compare(a.Active), strings.Compare(a.ID, b.ID))
}

// cursor names an entry's place in either order: its times and ID.
func cursor(e Entry) string {
	return fmt.Sprintf("%d.%d.%s", e.Created.UnixNano(), e.Active.UnixNano(), e.ID)
}

func parseCursor(s string) (Entry, error) {
	var created, active int64
	parts := strings.SplitN(s, ".", 3)
	if len(parts) != 3 {
		return Entry{}, fmt.Errorf("cursor %q: not a cursor a listing returned", s)
	}
	if _, err := fmt.Sscan(parts[0], &created); err != nil {
		return Entry{}, fmt.Errorf("cursor %q: not a cursor a listing returned", s)
	}
	if _, err := fmt.Sscan(parts[1], &active); err != nil {
		return Entry{}, fmt.Errorf("cursor %q: not a cursor a listing returned", s)
	}
	e := Entry{Record: Record{ID: parts[2], Created: time.Unix(0, created)}, Active: time.Unix(0, active)}
	return e, nil
}
