package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// recordCacheBytes bounds the signature records a ledger keeps in memory
// (a record of 64 leaves is about 3 KB).
const recordCacheBytes = 8 << 20

// sigRecord is a signature record read and parsed once: from the store,
// or as the ledger signed it (cacheRecords).
type sigRecord struct {
	once sync.Once
	rec  *events.Record
	err  error
}

// fullSig returns what a stored rathsig stands for: for a reference to a
// signature record (the events of a batch round are stored with one), the
// inline group signature it expands to, which verifies on its own and is
// what receipts and every event the ledger reads out carry; any other
// rathsig unchanged. A record that is not stored is reported as a bad
// signature: nothing was ever stored before its record.
func (l *Ledger) fullSig(ctx context.Context, sig string) (string, error) {
	ref, ok, err := events.ParseRecordRef(sig)
	if !ok || err != nil {
		return sig, err
	}
	slot := l.records.Get(ref.Record, func(string) *sigRecord { return &sigRecord{} })
	// Cached: what is read out was verified when stored or loaded.
	r := slot.Value
	r.once.Do(func() {
		var body []byte
		if body, r.err = l.readRecord(ctx, ref.Record); r.err == nil {
			r.rec, r.err = events.ParseRecord(ref.Record, body)
		}
	})
	if r.err != nil {
		l.records.Drop(slot) // not kept: the next reader asks again
		return "", r.err
	}
	l.records.Account(slot, r.rec.Size())
	return r.rec.Expand(ref)
}

// cacheRecords caches the records the ledger just signed and stored, so that
// the receipts and heads of their events are spelled without reading them
// back.
func (l *Ledger) cacheRecords(recs []events.RecordSigs) {
	for _, rs := range recs {
		slot := l.records.Get(rs.ID, func(string) *sigRecord { return &sigRecord{} })
		r := slot.Value
		r.once.Do(func() { r.rec = rs.Signed })
		if r.err == nil {
			l.records.Account(slot, r.rec.Size())
		}
	}
}

// receipt returns an ack as a receipt on its own: its signature inline
// (fullSig), never a reference to a record.
func (l *Ledger) receipt(ctx context.Context, a api.Ack) (api.Ack, error) {
	sig, err := l.fullSig(ctx, a.Sig)
	if err != nil {
		return api.Ack{}, unavailable(err)
	}
	a.Sig, a.Record = sig, nil
	return a, nil
}

// verifySig checks a stored event's signature, expanded with its record as
// the stream holds it now (not the cache: verify trusts no cache, and a
// ledger loading a session decides on it whether to chain onto it).
func (l *Ledger) verifySig(ctx context.Context, session string, seq uint64, hash, sig string) error {
	ref, ok, err := events.ParseRecordRef(sig)
	if err != nil {
		return err
	}
	if ok {
		rec, err := l.readRecord(ctx, ref.Record)
		if err != nil {
			return err
		}
		if sig, err = events.Expand(ref, rec); err != nil {
			return err
		}
	}
	return l.keys.Verify(session, seq, hash, sig)
}

// readOut returns a stored body as the ledger serves it (rath.ledger.log,
// archives): with a reference to a signature record replaced by the inline
// signature, so that what a reader keeps verifies without the record.
func (l *Ledger) readOut(ctx context.Context, ev events.Stored, body []byte) ([]byte, error) {
	if !events.IsRecordRef(ev.Sig) {
		return body, nil
	}
	full, err := l.fullSig(ctx, ev.Sig)
	if err != nil {
		return nil, fmt.Errorf("event %d of %s: %w", ev.Seq, ev.Session, err)
	}
	out, ok := events.ReplaceSig(body, ev.Sig, full)
	if !ok {
		return nil, fmt.Errorf("event %d of %s: its rathsig is not where the ledger writes it", ev.Seq, ev.Session)
	}
	return out, nil
}

// readRecord reads a signature record from the stream. One that is not
// stored is a bad signature: nothing was ever stored before its record.
func (l *Ledger) readRecord(ctx context.Context, id string) ([]byte, error) {
	rec, err := l.store.SigRecord(ctx, id)
	if errors.Is(err, eventstore.ErrNotFound) {
		return nil, fmt.Errorf("%w: its signature record %s is not in %s", events.ErrBadSignature, id, events.StreamSigs)
	}
	return rec, err
}
