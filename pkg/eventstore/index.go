package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/openrath/rath/pkg/ledgerapi"
)

// Record is a session's entry in the session index, stored exactly as the
// ledger protocol lists it. The ledger writes it on lifecycle events only, so
// listing sessions never folds a log.
type Record = ledgerapi.Session

const (
	recordPrefix = "s."
	childPrefix  = "c."
)

// PutRecord writes a session's index record.
func (s *Store) PutRecord(ctx context.Context, r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("index session %s: %w", r.ID, err)
	}
	rev, err := s.index.Put(ctx, recordPrefix+r.ID, b)
	if err != nil {
		return fmt.Errorf("index session %s: %w", r.ID, err)
	}
	if c := s.catalog.Load(); c != nil {
		c.apply(r, rev)
	}
	if r.Parent != "" {
		if _, err := s.index.Put(ctx, childPrefix+r.Parent+"."+r.ID, nil); err != nil {
			return fmt.Errorf("index fork %s of %s: %w", r.ID, r.Parent, err)
		}
	}
	return nil
}

// GetRecord reads a session's index record; ErrNotFound if it has none.
func (s *Store) GetRecord(ctx context.Context, id string) (Record, error) {
	e, err := s.index.Get(ctx, recordPrefix+id)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return Record{}, fmt.Errorf("session %s: %w", id, ErrNotFound)
		}
		return Record{}, fmt.Errorf("session %s: %w", id, err)
	}
	var r Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return Record{}, fmt.Errorf("session %s index record: %w", id, err)
	}
	return r, nil
}

// Records lists every indexed session, ordered by creation time.
func (s *Store) Records(ctx context.Context) ([]Record, error) {
	keys, err := s.keys(ctx, recordPrefix+"*")
	if err != nil {
		return nil, err
	}
	out := make([]Record, 0, len(keys))
	for _, k := range keys {
		r, err := s.GetRecord(ctx, strings.TrimPrefix(k, recordPrefix))
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				continue // deleted between list and get
			}
			return nil, err
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// Children lists the sessions forked from parent.
func (s *Store) Children(ctx context.Context, parent string) ([]string, error) {
	prefix := childPrefix + parent + "."
	keys, err := s.keys(ctx, prefix+"*")
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, strings.TrimPrefix(k, prefix))
	}
	sort.Strings(out)
	return out, nil
}

func (s *Store) keys(ctx context.Context, filter string) ([]string, error) {
	l, err := s.index.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("list index keys %s: %w", filter, err)
	}
	var out []string
	for k := range l.Keys() {
		out = append(out, k)
	}
	return out, nil
}
