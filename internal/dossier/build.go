package dossier

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Options configure Build.
type Options struct {
	// Blobs reads a content-addressed blob ("sha256:<hex>"), to keep the
	// full results and diffs that events cut at 16 KiB. Nil: none are read.
	Blobs func(ctx context.Context, ref string) ([]byte, error)
	// Now is the export time (default time.Now).
	Now func() time.Time
	// Log gets a warning for each blob that cannot be read (default: none).
	Log *slog.Logger
}

// Build reads the tree of session from the ledger and assembles its dossier:
// the lineage of session's root (every fork, recursively), every session a
// merge of one of them took events from and, in turn, their trees. Each
// branch's own events are read up to the head the lineage reported, so the
// dossier is one consistent cut even of sessions still running.
func Build(ctx context.Context, c *client.Client, session string, opts Options) (*Dossier, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	own := map[string][]events.Stored{}
	queue := []string{session}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		if _, ok := own[id]; ok {
			continue
		}
		g, err := c.Lineage(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("dossier of %s: %w", session, err)
		}
		var nodes []*api.Node
		var walk func(n *api.Node)
		walk = func(n *api.Node) {
			if n == nil {
				return
			}
			nodes = append(nodes, n)
			for _, ch := range n.Children {
				walk(ch)
			}
		}
		walk(g.Root)
		for _, n := range nodes {
			if _, ok := own[n.Session]; ok {
				continue
			}
			evs, err := ownEvents(ctx, c, n.Session, n.ForkSeq+1, n.Head)
			if err != nil {
				return nil, fmt.Errorf("dossier of %s: %w", session, err)
			}
			own[n.Session] = evs
			queue = append(queue, mergeSources(evs)...)
		}
		if _, ok := own[id]; !ok {
			return nil, fmt.Errorf("dossier of %s: the lineage of %s does not name it", session, id)
		}
	}
	keys, err := c.Keys(ctx)
	if err != nil {
		return nil, fmt.Errorf("dossier of %s: %w", session, err)
	}
	blobs := readBlobs(ctx, own, opts)
	d, err := Assemble(session, own, blobs)
	if err != nil {
		return nil, fmt.Errorf("dossier of %s: %w", session, err)
	}
	d.ExportedAt = opts.Now().UTC()
	d.Environment = Env(c)
	for _, k := range keys.Keys {
		d.Keys = append(d.Keys, Key{ID: k.ID, PublicKey: k.PublicKey})
	}
	for _, ref := range sortedKeys(blobs) {
		d.Blobs = append(d.Blobs, Blob{Ref: ref, File: blobFile(ref), Bytes: len(blobs[ref])})
	}
	d.tree.blobs = blobs
	return d, nil
}

// ownEvents reads a session's own events from..to, as stored; all of them,
// since the lineage reported to as the head.
func ownEvents(ctx context.Context, c *client.Client, id string, from, to uint64) ([]events.Stored, error) {
	var out []events.Stored
	if err := c.Events(ctx, id, client.Range{From: from, To: to}, func(ev events.Stored) error {
		out = append(out, ev)
		return nil
	}); err != nil {
		return nil, err
	}
	if next := from + uint64(len(out)); next <= to {
		return nil, fmt.Errorf("log of %s: no events from %d (head %d)", id, next, to)
	}
	return out, nil
}

// mergeSources are the sessions a branch's merges took events from.
func mergeSources(evs []events.Stored) []string {
	var out []string
	for _, e := range evs {
		if e.Type != events.TypeSessionMerged {
			continue
		}
		var m events.SessionMerged
		if err := json.Unmarshal(e.Data, &m); err != nil {
			continue
		}
		out = append(out, m.Source)
		for _, s := range m.Segments {
			out = append(out, s.Session)
		}
	}
	return out
}

func readBlobs(ctx context.Context, own map[string][]events.Stored, opts Options) map[string][]byte {
	blobs := map[string][]byte{}
	if opts.Blobs == nil {
		return blobs
	}
	for _, id := range sortedKeys(own) {
		for _, e := range own[id] {
			if e.Type != events.TypeToolCompleted {
				continue
			}
			var d events.ToolCompleted
			if err := json.Unmarshal(e.Data, &d); err != nil {
				continue
			}
			for _, ref := range []string{d.ResultRef, d.DiffRef} {
				if ref == "" || blobs[ref] != nil {
					continue
				}
				if _, ok := blobName(ref); !ok {
					opts.Log.Warn("dossier: blob reference is not sha256:<hex>", "session", id, "seq", e.Seq, "ref", ref)
					continue
				}
				data, err := opts.Blobs(ctx, ref)
				if err != nil {
					opts.Log.Warn("dossier: blob not read", "session", id, "seq", e.Seq, "ref", ref, "err", err)
					continue
				}
				blobs[ref] = data
			}
		}
	}
	return blobs
}

// blobName is the hex of a "sha256:<hex>" reference.
func blobName(ref string) (string, bool) {
	hex, ok := strings.CutPrefix(ref, "sha256:")
	if !ok || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
		return "", false
	}
	return hex, true
}

func blobFile(ref string) string {
	name, _ := blobName(ref)
	return DirBlobs + "/" + name
}

// Env describes this process and the NATS server c is connected to.
func Env(c *client.Client) Environment {
	e := Environment{GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			e.RathVersion = v
		}
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				e.RathCommit = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty && e.RathCommit != "" {
			e.RathCommit += "+dirty"
		}
	}
	if c != nil && c.Conn() != nil {
		e.NATSServerVersion = c.Conn().ConnectedServerVersion()
	}
	return e
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
