// Package domainstate compares the state of a task's domain (a JSON
// document: a shop's orders, users and products) with the state the task
// expects, and says where they differ. rath demo support grades a run with
// it; the same comparison serves any grader that checks a final state.
//
// Documents are compared as JSON values: objects key by key, arrays element
// by element, numbers by value (1 and 1.0 are equal), so formatting and key
// order never count.
package domainstate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// Difference is one place where the actual state differs from the
// expected one. Path names it from the document's root, JSON-pointer style
// ("/orders/W1002/status"); Expected and Actual are the JSON values there
// (absent when the key is missing on that side).
type Difference struct {
	Path     string          `json:"path"`
	Expected json.RawMessage `json:"expected,omitempty"`
	Actual   json.RawMessage `json:"actual,omitempty"`
}

// String says the difference for people: `/orders/W1002/status: expected
// "cancelled", got "pending"`.
func (d Difference) String() string {
	switch {
	case d.Expected == nil:
		return fmt.Sprintf("%s: not expected, got %s", d.Path, d.Actual)
	case d.Actual == nil:
		return fmt.Sprintf("%s: expected %s, missing", d.Path, d.Expected)
	}
	return fmt.Sprintf("%s: expected %s, got %s", d.Path, d.Expected, d.Actual)
}

// ErrNotJSON is returned by Compare and Changes for a document that is not
// one JSON value.
var ErrNotJSON = errors.New("not a JSON document")

// Compare returns where actual differs from expected, in path order: nil
// when they are the same JSON value. Both must be JSON documents.
func Compare(expected, actual []byte) ([]Difference, error) {
	e, err := decode(expected)
	if err != nil {
		return nil, fmt.Errorf("expected state: %w", err)
	}
	a, err := decode(actual)
	if err != nil {
		return nil, fmt.Errorf("actual state: %w", err)
	}
	return CompareValues(e, a), nil
}

// CompareValues is Compare of decoded documents: values as encoding/json
// decodes them into an any (with UseNumber or without).
func CompareValues(expected, actual any) []Difference {
	var out []Difference
	diff("", expected, actual, &out)
	return out
}

// Change is one value a step changed: Path as in Difference, Before and
// After the JSON values (absent for a key the step added or removed).
type Change struct {
	Path   string          `json:"path"`
	Before json.RawMessage `json:"before,omitempty"`
	After  json.RawMessage `json:"after,omitempty"`
}

// Changes returns what changed from before to after: the differences read
// as a step's changes, in path order.
func Changes(before, after []byte) ([]Change, error) {
	ds, err := Compare(before, after)
	if err != nil {
		return nil, err
	}
	out := make([]Change, len(ds))
	for i, d := range ds {
		out[i] = Change{Path: d.Path, Before: d.Expected, After: d.Actual}
	}
	return out, nil
}

func decode(doc []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotJSON, err)
	}
	if rest := bytes.TrimSpace(doc[dec.InputOffset():]); len(rest) > 0 {
		if json.Valid(rest) {
			return nil, fmt.Errorf("%w: more than one value", ErrNotJSON)
		}
		return nil, fmt.Errorf("%w: trailing data after the value", ErrNotJSON)
	}
	return v, nil
}

func diff(path string, e, a any, out *[]Difference) {
	if eo, ok := e.(map[string]any); ok {
		if ao, ok := a.(map[string]any); ok {
			keys := make([]string, 0, len(eo)+len(ao))
			for k := range eo {
				keys = append(keys, k)
			}
			for k := range ao {
				if _, ok := eo[k]; !ok {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range keys {
				ev, inE := eo[k]
				av, inA := ao[k]
				p := path + "/" + escape(k)
				switch {
				case !inE:
					*out = append(*out, Difference{Path: p, Actual: raw(av)})
				case !inA:
					*out = append(*out, Difference{Path: p, Expected: raw(ev)})
				default:
					diff(p, ev, av, out)
				}
			}
			return
		}
	}
	if ea, ok := e.([]any); ok {
		if aa, ok := a.([]any); ok {
			for i := 0; i < max(len(ea), len(aa)); i++ {
				p := path + "/" + strconv.Itoa(i)
				switch {
				case i >= len(ea):
					*out = append(*out, Difference{Path: p, Actual: raw(aa[i])})
				case i >= len(aa):
					*out = append(*out, Difference{Path: p, Expected: raw(ea[i])})
				default:
					diff(p, ea[i], aa[i], out)
				}
			}
			return
		}
	}
	if !equal(e, a) {
		if path == "" {
			path = "/"
		}
		*out = append(*out, Difference{Path: path, Expected: raw(e), Actual: raw(a)})
	}
}

// equal compares two scalars (or a container with a value of another
// kind): numbers by value.
func equal(e, a any) bool {
	en, eok := number(e)
	an, aok := number(a)
	if eok && aok {
		return en.Cmp(an) == 0
	}
	if eok || aok {
		return false
	}
	switch e.(type) {
	case map[string]any, []any:
		return false // a is of another kind: diff compared like with like
	}
	return e == a
}

// number returns a JSON number's exact value: 45, 45.0 and 4.5e1 are one
// value, and large integers compare exactly.
func number(v any) (*big.Rat, bool) {
	var s string
	switch n := v.(type) {
	case json.Number:
		s = n.String()
	case float64:
		s = strconv.FormatFloat(n, 'g', -1, 64)
	case int:
		s = strconv.Itoa(n)
	default:
		return nil, false
	}
	r, ok := new(big.Rat).SetString(s)
	return r, ok
}

// escape escapes a key as a JSON pointer token (RFC 6901).
func escape(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

func raw(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(strconv.Quote(fmt.Sprint(v)))
	}
	return b
}
