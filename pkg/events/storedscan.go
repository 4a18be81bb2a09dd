package events

import (
	"encoding/json"
	"github.com/openrath/rath/internal/jsonscan"
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"
)

// scanStored reads a stored body the way the ledger writes it (an RFC 8785
// object: no whitespace, members in a known set) without a general JSON
// decoder: the attributes are substrings of the body, the data a sub-slice
// of it, so the caller must not modify body afterwards. Replaying a long session parses
// every event, so this is most of a replay's CPU after the read itself. It
// reports false for anything it does not expect (whitespace, an escaped
// string, a number where a string belongs, a member name that is not
// lowercase ASCII); ParseStored then decodes the
// body with the general decoder, which also names what is wrong.
// TestScanStoredMatchesDecoder holds the two together.
func scanStored(body []byte) (Stored, bool) {
	var s Stored
	n := len(body)
	if n < 2 || body[0] != '{' || body[n-1] != '}' {
		return s, false
	}
	// The attributes are substrings of the body itself, not copies: a
	// replay parses every event of a session, and copying each body would
	// be most of the garbage it makes. Stored keeps the body as Raw anyway,
	// and a stored body is never written to once read.
	text := unsafe.String(&body[0], n)
	i := 1
	for i < n-1 {
		if body[i] != '"' {
			return s, false
		}
		k := i + 1
		for k < n && body[k] != '"' && body[k] != '\\' {
			if c := body[k]; c >= 'A' && c <= 'Z' || c >= utf8.RuneSelf {
				// The decoder matches member names without regard to
				// case ("ID" sets the ID): let it.
				return s, false
			}
			k++
		}
		if k >= n || body[k] != '"' || k+1 >= n || body[k+1] != ':' {
			return s, false
		}
		key := text[i+1 : k]
		v := k + 2
		end := jsonscan.ValueEnd(body, v)
		if end < 0 {
			return s, false
		}
		if key == "data" {
			s.Data = json.RawMessage(body[v:end:end])
			if string(s.Data) == "null" {
				s.Data = nil // as the decoder reads it
			}
		} else if !setAttribute(&s, key, body, text, v, end) {
			return s, false
		}
		i = end
		if i < n-1 {
			if body[i] != ',' || i+1 >= n-1 {
				return s, false // not a separator, or one with no member after it
			}
			i++
		}
	}
	if i != n-1 {
		return s, false
	}
	s.Raw = body
	return s, true
}

// setAttribute sets the member key of s from the value body[v:end]; it
// reports false for a value of a type the attribute cannot have.
func setAttribute(s *Stored, key string, body []byte, text string, v, end int) bool {
	str := func() (string, bool) {
		if body[v] != '"' {
			return "", false
		}
		for j := v + 1; j < end-1; j++ {
			if body[j] == '\\' {
				return "", false // escaped: let the general decoder unescape it
			}
		}
		return text[v+1 : end-1], true
	}
	var ok bool
	switch key {
	case "id":
		s.ID, ok = str()
	case "source":
		s.Source, ok = str()
	case "type":
		s.Type, ok = str()
	case "subject":
		s.Session, ok = str()
	case ExtPrev:
		s.Prev, ok = str()
	case ExtHash:
		s.Hash, ok = str()
	case ExtSig:
		s.Sig, ok = str()
	case ExtCausation:
		s.Causation, ok = str()
	case ExtActor:
		s.Actor, ok = str()
	case ExtTenant:
		s.Tenant, ok = str()
	case ExtOnBehalf:
		s.OnBehalf, ok = str()
	case ExtCorrelation:
		s.Correlation, ok = str()
	case "time":
		var t string
		if t, ok = str(); ok {
			var err error
			s.Time, err = time.Parse(time.RFC3339Nano, t)
			ok = err == nil
		}
	case ExtSeq:
		seq, err := strconv.ParseUint(text[v:end], 10, 64)
		s.Seq, ok = seq, err == nil
	default:
		return true // an attribute Stored does not keep
	}
	return ok
}
