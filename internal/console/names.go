package console

import (
	"context"
	"sync"
	"time"

	"github.com/openrath/rath/internal/dossier"
	"github.com/openrath/rath/pkg/client"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Branch names (root, fork-1@22) are the dossier's (dossier.BranchNames),
// read from the lineage: a session page asks for its tree's at once; the
// sessions list, which refreshes every few seconds, keeps each tree's for
// namesFresh, and names at most namesPerList trees a request (the rest
// show their IDs until a later refresh).
const (
	namesFresh   = 20 * time.Second
	namesPerList = 24
	namesKept    = 20000
)

// nameCache holds the names of the sessions of trees a list showed, each
// as the dossier of its own tree names it, by the client that read them
// (an identity reads its own tenant's sessions only).
type nameCache struct {
	mu   sync.Mutex
	byID map[nameKey]namedAt
}

type nameKey struct {
	c  *client.Client
	id string
}

type namedAt struct {
	name string
	at   time.Time
}

// treeNames names the sessions of id's tree, as the dossier of id names
// them, and returns the IDs of the tree's own sessions (not those of trees
// a merge took events from, which their own tree names).
func treeNames(ctx context.Context, c *client.Client, id string) (map[string]string, []string, error) {
	g, err := c.Lineage(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	names, err := dossier.NamesOf(ctx, c, g)
	if err != nil {
		return nil, nil, err
	}
	var own []string
	var walk func(n *api.Node)
	walk = func(n *api.Node) {
		if n == nil {
			return
		}
		own = append(own, n.Session)
		for _, ch := range n.Children {
			walk(ch)
		}
	}
	walk(g.Root)
	return names, own, nil
}

// listNames names the listed sessions that are part of a tree (forked, or
// forked from), from the cache or the lineage, and the parents they name.
func (s *Server) listNames(ctx context.Context, c *client.Client, rows []listRow) {
	now := s.now()
	s.names.mu.Lock()
	if s.names.byID == nil || len(s.names.byID) > namesKept {
		s.names.byID = make(map[nameKey]namedAt)
	}
	s.names.mu.Unlock()
	lookup := func(id string) (string, bool) {
		s.names.mu.Lock()
		defer s.names.mu.Unlock()
		n, ok := s.names.byID[nameKey{c, id}]
		return n.name, ok && now.Sub(n.at) < namesFresh
	}
	walks := 0
	for i := range rows {
		r := &rows[i]
		if r.Parent == "" && r.Forks == 0 {
			continue // a session alone: its ID is its name
		}
		name, ok := lookup(r.ID)
		if !ok && walks < namesPerList {
			walks++
			names, own, err := treeNames(ctx, c, r.ID)
			if err != nil {
				s.log.Warn("console: branch names", "session", r.ID, "err", err)
				continue
			}
			s.names.mu.Lock()
			for _, id := range own {
				s.names.byID[nameKey{c, id}] = namedAt{names[id], now}
			}
			s.names.mu.Unlock()
			name, ok = names[r.ID], true
		}
		if ok {
			r.Name = name
		}
		if r.Parent != "" {
			r.ParentName, _ = lookup(r.Parent)
		}
	}
}

// named is the branch names of id's tree, to put in place of the long IDs
// a summary or a reason names (dossier.ReplaceIDs); nil when the lineage
// cannot be read, and the IDs stay.
func (s *Server) named(ctx context.Context, c *client.Client, id string) map[string]string {
	names, err := dossier.LineageNames(ctx, c, id)
	if err != nil {
		s.log.Warn("console: branch names", "session", id, "err", err)
		return nil
	}
	return names
}
