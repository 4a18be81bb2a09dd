package memory

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/memoryapi"
)

// item is the fold of one item's records.
type item struct {
	tenant    string // of its first record; never changes
	records   []memoryapi.Record
	versions  map[int]int // write records by version: index in records
	retracted map[int]bool
	n         int // versions written
}

// apply folds the item's next record. A retraction of version 0 retracts
// every version the item had then; a later write is live again.
func (it *item) apply(r memoryapi.Record) {
	it.records = append(it.records, r)
	switch r.Op {
	case memoryapi.OpWrite:
		if it.versions == nil {
			it.versions = map[int]int{}
		}
		it.versions[r.Version] = len(it.records) - 1
		it.n = max(it.n, r.Version)
	case memoryapi.OpRetract:
		if it.retracted == nil {
			it.retracted = map[int]bool{}
		}
		if r.Version > 0 {
			it.retracted[r.Version] = true
			return
		}
		for v := 1; v <= it.n; v++ {
			it.retracted[v] = true
		}
	}
}

// current is the version recall serves: the newest not retracted (nil if
// none). Retracting the newest version therefore rolls back to the one
// before it.
func (it *item) current() *memoryapi.Record {
	for v := it.n; v >= 1; v-- {
		if i, ok := it.versions[v]; ok && !it.retracted[v] {
			return &it.records[i]
		}
	}
	return nil
}

func (it *item) retractedList() []int {
	var out []int
	for v := range it.retracted {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// recorded locates a record by its session event (rath.memory.written or
// rath.memory.retracted).
type recorded struct {
	itemID  string
	version int
	op      string
}

// Items is the in-memory view of every item, kept current by following the
// backend, and the recall indexes over it: one per tenant, so that a
// tenant's recall ranks its own items with its own statistics (another
// tenant's documents would shift its scores, and so tell it which terms
// they hold) and another tenant's items never take its top k. Only the
// follower changes it.
type Items struct {
	mu      sync.RWMutex
	items   map[string]*item
	byEvent map[string]recorded // session event ID → record
	indexes map[string]*Index   // by tenant
	seen    progress
}

// NewItems returns an empty view.
func NewItems() *Items {
	return &Items{items: map[string]*item{}, byEvent: map[string]recorded{}, indexes: map[string]*Index{}}
}

// Apply folds a record read from the backend at position pos.
func (s *Items) Apply(r memoryapi.Record, pos uint64) error {
	if r.ItemID == "" { // an unreadable record: only the position moves
		s.seen.advance(pos)
		return nil
	}
	s.mu.Lock()
	it := s.items[r.ItemID]
	if it == nil {
		// The first record names the item's tenant; the service writes
		// every later one for the same tenant (Memory.append).
		it = &item{tenant: events.TenantOrDefault(r.Tenant)}
		s.items[r.ItemID] = it
	}
	index := s.indexes[it.tenant]
	if index == nil {
		index = NewIndex()
		s.indexes[it.tenant] = index
	}
	before := 0
	if c := it.current(); c != nil {
		before = c.Version
	}
	it.apply(r)
	if r.EventID != "" {
		if _, dup := s.byEvent[r.EventID]; !dup {
			s.byEvent[r.EventID] = recorded{r.ItemID, r.Version, r.Op}
		}
	}
	after := it.current()
	s.mu.Unlock()
	switch {
	case after == nil:
		index.Remove(r.ItemID)
	case after.Version != before:
		index.Put(r.ItemID, after.Version, after.Content, after.Scope, after.Tags)
	}
	s.seen.advance(pos)
	return nil
}

// Wait returns once every record up to position pos is applied.
func (s *Items) Wait(ctx context.Context, pos uint64) error { return s.seen.wait(ctx, pos) }

// Get returns a copy of an item's view, or false.
func (s *Items) Get(itemID string) (memoryapi.Item, []memoryapi.Record, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	it := s.items[itemID]
	if it == nil {
		return memoryapi.Item{}, nil, false
	}
	out := memoryapi.Item{ItemID: itemID, Tenant: it.tenant, Versions: it.n, Retracted: it.retractedList()}
	if c := it.current(); c != nil {
		cp := *c
		out.Current = &cp
	}
	return out, slices.Clone(it.records), true
}

// ByEvent finds the record of a session event: the version a
// rath.memory.written event wrote, or the version (0: all) a
// rath.memory.retracted event withdrew.
func (s *Items) ByEvent(eventID string) (recorded, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, ok := s.byEvent[eventID]
	return r, ok
}

// Record returns the write record of an item's version.
func (s *Items) Record(itemID string, version int) (memoryapi.Record, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	it := s.items[itemID]
	if it == nil {
		return memoryapi.Record{}, false
	}
	i, ok := it.versions[version]
	if !ok {
		return memoryapi.Record{}, false
	}
	return it.records[i], true
}

// Search ranks the current versions of tenant's items (anyTenant: every
// tenant's, each ranked in its own index and the best k of all kept).
func (s *Items) Search(query string, f memoryapi.Filter, tenant string, k int) []Result {
	s.mu.RLock()
	if tenant != anyTenant {
		index := s.indexes[tenant]
		s.mu.RUnlock()
		if index == nil {
			return nil
		}
		return index.Search(query, f.Scopes, f.Tags, k)
	}
	indexes := make([]*Index, 0, len(s.indexes))
	for _, x := range s.indexes {
		indexes = append(indexes, x)
	}
	s.mu.RUnlock()
	var out []Result
	for _, x := range indexes {
		out = append(out, x.Search(query, f.Scopes, f.Tags, k)...)
	}
	slices.SortFunc(out, func(a, b Result) int {
		if a.Score != b.Score {
			return cmp.Compare(b.Score, a.Score)
		}
		return strings.Compare(a.ItemID, b.ItemID)
	})
	return out[:min(k, len(out))]
}

// Len is the number of recallable items.
func (s *Items) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for _, x := range s.indexes {
		n += x.Len()
	}
	return n
}

// progress is a position that only grows, with waiters.
type progress struct {
	mu   sync.Mutex
	pos  uint64
	wake chan struct{}
}

func (p *progress) advance(pos uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pos <= p.pos {
		return
	}
	p.pos = pos
	if p.wake != nil {
		close(p.wake)
		p.wake = nil
	}
}

func (p *progress) get() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pos
}

func (p *progress) wait(ctx context.Context, pos uint64) error {
	for {
		p.mu.Lock()
		if p.pos >= pos {
			p.mu.Unlock()
			return nil
		}
		if p.wake == nil {
			p.wake = make(chan struct{})
		}
		wake := p.wake
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		}
	}
}
