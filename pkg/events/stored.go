package events

import (
	"encoding/json"
	"fmt"
	"time"

	jsoniter "github.com/json-iterator/go"
)

// Stored is an accepted event as read back from the sessions stream: the
// envelope attributes Rath relies on and the raw data. Decoding into Stored is
// much cheaper than a full CloudEvents decode, which matters when folding long
// sessions.
type Stored struct {
	ID          string    `json:"id"`
	Source      string    `json:"source"`
	Type        string    `json:"type"`
	Session     string    `json:"subject"`
	Time        time.Time `json:"time"`
	Seq         uint64    `json:"rathseq"`
	Prev        string    `json:"rathprev,omitempty"`
	Hash        string    `json:"rathhash"`
	Sig         string    `json:"rathsig,omitempty"`
	Causation   string    `json:"causationid,omitempty"`
	Correlation string    `json:"correlationid,omitempty"`
	// Actor is who proposed the event (tenant/user), as the ledger stamped it.
	Actor string `json:"rathactor,omitempty"`
	// Tenant, on a session's first event, is the tenant it belongs to.
	Tenant string `json:"rathtenant,omitempty"`
	// OnBehalf is the principal a service proposed the event for
	// (tenant/user), kept by the ledger only from a service.
	OnBehalf string          `json:"rathfor,omitempty"`
	Data     json.RawMessage `json:"data,omitempty"`
	// Raw is the stored body exactly as read: what the chain hash covers.
	Raw json.RawMessage `json:"-"`
}

// fastJSON decodes the hot paths (replay parses every stored event and its
// data) with json-iterator's encoding/json-compatible configuration, about
// twice as fast as the standard library on these small documents.
var fastJSON = jsoniter.ConfigCompatibleWithStandardLibrary

// ParseStored decodes a stored event body. The result shares body's memory
// (Raw is body; the attributes and Data may point into it): do not modify
// body afterwards.
func ParseStored(body []byte) (Stored, error) {
	if s, ok := scanStored(body); ok {
		return s, nil
	}
	return decodeStored(body)
}

// decodeStored decodes a stored body with the general JSON decoder.
func decodeStored(body []byte) (Stored, error) {
	var s Stored
	if err := fastJSON.Unmarshal(body, &s); err != nil {
		return Stored{}, fmt.Errorf("parse stored event: %w", err)
	}
	s.Raw = body
	return s, nil
}

// Decode decodes the event's data into its registered Go type.
func (s Stored) Decode() (any, error) { return DecodeData(s.Type, s.Data) }
