package eval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/openrath/rath/internal/domainstate"
)

// maxStateDiffs bounds the differences an expected-state grader reports:
// the first few say what is wrong; all of them would bury it.
const maxStateDiffs = 10

// parseJSON checks that data is one JSON document, as an expected state
// given in a file must be, and returns it decoded.
func parseJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("not JSON: empty")
		}
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("not JSON: more than one value")
	}
	return v, nil
}

// canonicalJSON turns a value decoded from YAML into the JSON document it
// stands for: a mapping with a key that is not a string, or a value JSON
// has no form for, is an error.
func canonicalJSON(v any) (json.RawMessage, error) {
	return json.Marshal(v)
}

// stateDiffs compares a JSON document of the final workspace with the
// expected one (internal/domainstate: objects by key, arrays by item,
// numbers by value) and says where they differ, each as "PATH: expected X,
// got Y" with a JSON-pointer path, at most maxStateDiffs of them and a
// last line saying how many more there were; none when they are equal.
func stateDiffs(expected json.RawMessage, actual []byte) ([]string, error) {
	ds, err := domainstate.Compare(expected, actual)
	if err != nil {
		return nil, err
	}
	var out []string
	for i, d := range ds {
		if i == maxStateDiffs {
			out = append(out, fmt.Sprintf("and %d more", len(ds)-i))
			break
		}
		out = append(out, d.String())
	}
	return out, nil
}
