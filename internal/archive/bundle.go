// Package archive is the format of a session's archive bundle: the session's
// own stored events, in order, exactly as the sessions stream held them, so
// that anyone can check them offline by recomputing the hash chain with
// package events. The ledger writes a bundle to the object store when it
// archives a closed session, and reads purged events back from it.
package archive

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/openrath/rath/pkg/events"
)

// Format names the bundle format in its header line.
const Format = "rath.archive.v1"

// Header is the first line of a bundle.
type Header struct {
	Format  string `json:"format"`
	Session string `json:"session"`
	// FromSeq is the session's first own sequence: 1 for a root session,
	// the fork point + 1 for a fork, whose earlier events are its
	// ancestors' (and in their archives, if archived).
	FromSeq uint64 `json:"from_seq"`
	// Prev is the rathprev of the first event: empty for a root session,
	// the parent's hash at the fork point for a fork.
	Prev          string `json:"prev,omitempty"`
	HeadSeq       uint64 `json:"head_seq"`
	HeadHash      string `json:"head_hash"`
	HeadStreamSeq uint64 `json:"head_stream_seq"`
	Events        int    `json:"events"`
}

// Entry is one stored event: where the sessions stream held it and its body,
// byte for byte.
type Entry struct {
	StreamSeq uint64          `json:"stream_seq"`
	Subject   string          `json:"subject"`
	Event     json.RawMessage `json:"event"`
}

// Bundle is a header and the session's own events in sequence order.
type Bundle struct {
	Header
	Entries []Entry
}

// Marshal renders the bundle as JSON Lines: the header, then one entry a
// line. Stored bodies are canonical JSON (no newline, no HTML escaping
// applied), and are written unchanged.
func (b *Bundle) Marshal() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(b.Header); err != nil {
		return nil, fmt.Errorf("archive of %s: header: %w", b.Session, err)
	}
	for _, e := range b.Entries {
		if err := enc.Encode(e); err != nil {
			return nil, fmt.Errorf("archive of %s: stream %d: %w", b.Session, e.StreamSeq, err)
		}
	}
	return buf.Bytes(), nil
}

// Parse reads a bundle without checking it (Verify does).
func Parse(data []byte) (*Bundle, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	var b Bundle
	line := 0
	for sc.Scan() {
		line++
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		if line == 1 {
			if err := json.Unmarshal(sc.Bytes(), &b.Header); err != nil {
				return nil, fmt.Errorf("archive bundle: header: %w", err)
			}
			if b.Format != Format {
				return nil, fmt.Errorf("archive bundle: format %q, want %q", b.Format, Format)
			}
			continue
		}
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("archive bundle of %s: line %d: %w", b.Session, line, err)
		}
		b.Entries = append(b.Entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("archive bundle: %w", err)
	}
	if line == 0 {
		return nil, errors.New("archive bundle: empty")
	}
	return &b, nil
}

// Verify recomputes the chain of the bundle's events with the chain walker
// (events.Chain): every hash from the body, every sequence one more than the
// one before from FromSeq, every rathprev the previous hash (the first one
// Prev), every event of the bundle's session, and a fork's first event
// recording the fork point and the parent hash it chains onto. Then what
// only a bundle says: each event stored on its session's subjects, in
// stream order, and the head as the header says.
func (b *Bundle) Verify() error {
	if len(b.Entries) != b.Events || b.Events == 0 {
		return fmt.Errorf("archive of %s: header says %d events, bundle holds %d", b.Session, b.Events, len(b.Entries))
	}
	if b.FromSeq == 0 {
		return fmt.Errorf("archive of %s: header says from_seq 0; sequences start at 1", b.Session)
	}
	chain := events.Chain{Session: b.Session, Seq: b.FromSeq - 1, Hash: b.Prev}
	var lastStream uint64
	for i, e := range b.Entries {
		ev, err := chain.Next(e.Event)
		if err != nil {
			return fmt.Errorf("archive of %s: entry %d: %w", b.Session, i+1, err)
		}
		if e.StreamSeq <= lastStream {
			return fmt.Errorf("archive of %s: sequence %d out of stream order", b.Session, ev.Seq)
		}
		if sid, _ := events.SessionFromSubject(e.Subject); sid != b.Session {
			return fmt.Errorf("archive of %s: sequence %d stored on %s", b.Session, ev.Seq, e.Subject)
		}
		lastStream = e.StreamSeq
	}
	if chain.Seq != b.HeadSeq || chain.Hash != b.HeadHash || lastStream != b.HeadStreamSeq {
		return fmt.Errorf("archive of %s: ends at %d (%s, stream %d), header says %d (%s, stream %d)", b.Session, chain.Seq, chain.Hash, lastStream, b.HeadSeq, b.HeadHash, b.HeadStreamSeq)
	}
	return nil
}
