package dossier

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/openrath/rath/pkg/client"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// BranchNames names the branches of a tree for people, by ID: short,
// distinct and stable as the tree grows. The first branch without a parent
// is "root" (Dossier.Branches lists the root of the asked session first);
// any other branch without one, the root of a tree a merge took events
// from, is "root-2", "root-3"… in the order given. A fork is "fork-N@S":
// N numbers the forks from 1 in the order they were created (Created, then
// ID) across the whole tree, S is the sequence it forks at. A fork created
// later never renames an earlier one, so the names a run printed live are
// the names its dossier uses. Only Parent, ForkSeq and Created are read.
//
// The names are for reading; the full IDs stay in dossier.json and on hover
// in the graph.
func BranchNames(branches []Branch) map[string]string {
	names := make(map[string]string, len(branches))
	var forks []Branch
	roots := 0
	for _, b := range branches {
		if b.Parent != "" {
			forks = append(forks, b)
			continue
		}
		roots++
		names[b.ID] = "root"
		if roots > 1 {
			names[b.ID] = fmt.Sprintf("root-%d", roots)
		}
	}
	slices.SortStableFunc(forks, func(a, b Branch) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.ID, b.ID))
	})
	for i, b := range forks {
		names[b.ID] = fmt.Sprintf("fork-%d@%d", i+1, b.ForkSeq)
	}
	return names
}

// LineageNames names the branches of session's tree as its dossier names
// them (BranchNames), from the ledger's lineage alone, reading no event:
// so "rath graph", "rath audit" and the console call a branch what the
// demo and the dossier call it. See NamesOf.
func LineageNames(ctx context.Context, c *client.Client, session string) (map[string]string, error) {
	g, err := c.Lineage(ctx, session)
	if err != nil {
		return nil, fmt.Errorf("names of the branches of %s: %w", session, err)
	}
	return NamesOf(ctx, c, g)
}

// NamesOf names the branches of g's tree as the dossier of g.Session names
// them (BranchNames): the tree of its root and, as Build follows them, the
// trees its merges took events from, whose lineages it reads (only when a
// merge names a session outside the tree).
func NamesOf(ctx context.Context, c *client.Client, g api.Graph) (map[string]string, error) {
	var roots, forks []Branch
	seen := map[string]bool{}
	var queue []string
	add := func(g api.Graph) {
		var walk func(n *api.Node, parent string)
		walk = func(n *api.Node, parent string) {
			if n == nil || seen[n.Session] {
				return
			}
			seen[n.Session] = true
			b := Branch{ID: n.Session, Parent: parent, ForkSeq: n.ForkSeq, Created: n.Created}
			if parent == "" {
				roots = append(roots, b)
			} else {
				forks = append(forks, b)
			}
			for _, m := range n.Merges {
				queue = append(queue, m.Source)
			}
			for _, ch := range n.Children {
				walk(ch, n.Session)
			}
		}
		walk(g.Root, "")
	}
	add(g)
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		if seen[id] {
			continue
		}
		other, err := c.Lineage(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("names of the branches of %s: the tree of %s, which a merge took events from: %w", g.Session, id, err)
		}
		add(other)
	}
	// As the dossier orders them (session.NewTree): the asked session's
	// root first, then the others by the time of their first event.
	if len(roots) > 1 {
		slices.SortStableFunc(roots[1:], func(a, b Branch) int {
			return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.ID, b.ID))
		})
	}
	return BranchNames(append(roots, forks...)), nil
}

// Labelled is a branch as people read it where there is room for both: its
// name and its ID, or its ID alone when it is its own name or has none.
func Labelled(names map[string]string, id string) string {
	if name, ok := names[id]; ok && name != "" && name != id {
		return name + " (" + id + ")"
	}
	return id
}

// namer shows a dossier's branches by their names (BranchNames).
type namer map[string]string

func newNamer(d *Dossier) namer {
	n := namer{}
	for _, b := range d.Branches {
		n[b.ID] = b.Name
		if b.Name == "" {
			n[b.ID] = b.ID
		}
	}
	return n
}

// of is the name of a branch, or id itself when the dossier does not hold it.
func (n namer) of(id string) string {
	if name, ok := n[id]; ok {
		return name
	}
	return id
}

// text replaces the long branch IDs standing in s (a close reason that
// names the fork a session continued on, say) with their names (ReplaceIDs).
func (n namer) text(s string) string {
	return ReplaceIDs(s, n)
}

// minReplacedID is the length from which ReplaceIDs replaces an ID: a
// generated one (a UUID, 36 characters, and its forks) is unreadable in
// prose, a short one a person chose ("fix") is readable, and may be a word
// of the text too.
const minReplacedID = 20

// ReplaceIDs replaces in s every whole occurrence of a session ID of names
// (BranchNames) at least 20 characters long with its name. A longer ID wins
// over its prefix (a fork's ID often extends its parent's), and an
// occurrence between ID characters (letters, digits, '-', '_') is not whole.
func ReplaceIDs(s string, names map[string]string) string {
	if len(names) == 0 || s == "" {
		return s
	}
	ids := make([]string, 0, len(names))
	for id := range names {
		if len(id) >= minReplacedID {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b string) int { return cmp.Or(cmp.Compare(len(b), len(a)), cmp.Compare(a, b)) })
	var out strings.Builder
	for i := 0; i < len(s); {
		matched := false
		if i == 0 || !idByte(s[i-1]) {
			for _, id := range ids {
				if strings.HasPrefix(s[i:], id) && (i+len(id) == len(s) || !idByte(s[i+len(id)])) {
					out.WriteString(names[id])
					i += len(id)
					matched = true
					break
				}
			}
		}
		if !matched {
			out.WriteByte(s[i])
			i++
		}
	}
	return out.String()
}

func idByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}
