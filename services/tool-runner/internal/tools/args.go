package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// compiled holds each tool's compiled schema. Arguments are checked against
// the very schema Specs offers, so what a model is told and what is enforced
// cannot drift apart.
var compiled = sync.OnceValues(func() (map[string]*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	out := make(map[string]*jsonschema.Schema, len(builtins))
	for name, t := range builtins {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(t.schema))
		if err != nil {
			return nil, fmt.Errorf("schema of %s: %w", name, err)
		}
		url := "urn:rath:tool:" + name
		if err := c.AddResource(url, doc); err != nil {
			return nil, fmt.Errorf("schema of %s: %w", name, err)
		}
		if out[name], err = c.Compile(url); err != nil {
			return nil, fmt.Errorf("schema of %s: %w", name, err)
		}
	}
	return out, nil
})

// validate checks a tool's arguments against its schema. Absent or null
// arguments stand for the empty object.
func validate(name string, args json.RawMessage) error {
	schemas, err := compiled()
	if err != nil {
		return err
	}
	var v any = map[string]any{}
	if trimmed := bytes.TrimSpace(args); len(trimmed) > 0 && !bytes.Equal(trimmed, []byte("null")) {
		if v, err = jsonschema.UnmarshalJSON(bytes.NewReader(trimmed)); err != nil {
			return &ArgError{Tool: name, Reason: "not valid JSON: " + err.Error()}
		}
	}
	err = schemas[name].Validate(v)
	var ve *jsonschema.ValidationError
	if err == nil || !errors.As(err, &ve) {
		return err
	}
	var errs []error
	for _, p := range problems(ve) {
		errs = append(errs, &ArgError{Tool: name, Field: p.field, Reason: p.reason})
	}
	return errors.Join(errs...)
}

// decode unmarshals validated arguments.
func decode[T any](name string, args json.RawMessage) (T, error) {
	var v T
	if trimmed := bytes.TrimSpace(args); len(trimmed) > 0 && !bytes.Equal(trimmed, []byte("null")) {
		if err := json.Unmarshal(trimmed, &v); err != nil {
			return v, &ArgError{Tool: name, Reason: err.Error()}
		}
	}
	return v, nil
}

type problem struct{ field, reason string }

var printer = message.NewPrinter(language.English)

// problems flattens the library's error tree into its leaves, naming missing
// and unknown properties by their own field.
func problems(root *jsonschema.ValidationError) []problem {
	var out []problem
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		at := e.InstanceLocation
		switch k := e.ErrorKind.(type) {
		case *kind.Required:
			for _, name := range k.Missing {
				out = append(out, problem{field(append(slices.Clone(at), name)), "is required"})
			}
		case *kind.AdditionalProperties:
			for _, name := range k.Properties {
				out = append(out, problem{field(append(slices.Clone(at), name)), "is not an argument of this tool"})
			}
		default:
			out = append(out, problem{field(at), reason(e.ErrorKind)})
		}
	}
	walk(root)
	slices.SortStableFunc(out, func(a, b problem) int { return strings.Compare(a.field, b.field) })
	return out
}

// field writes an instance location as "command[0]".
func field(tokens []string) string {
	var b strings.Builder
	for i, t := range tokens {
		if _, err := strconv.Atoi(t); err == nil && i > 0 {
			b.WriteString("[" + t + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(t)
	}
	return b.String()
}

func reason(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Type:
		return fmt.Sprintf("must be of type %s, got %s", strings.Join(k.Want, " or "), k.Got)
	case *kind.MinLength:
		if k.Want == 1 {
			return "must not be empty"
		}
		return fmt.Sprintf("must be at least %d characters long", k.Want)
	case *kind.MinItems:
		return fmt.Sprintf("must have at least %d items", k.Want)
	case *kind.Minimum:
		return fmt.Sprintf("must be at least %s, got %s", k.Want.RatString(), k.Got.RatString())
	case *kind.Maximum:
		return fmt.Sprintf("must be at most %s, got %s", k.Want.RatString(), k.Got.RatString())
	}
	return k.LocalizedString(printer)
}
