// Package schema holds the JSON Schema (draft 2020-12) of every event kind's
// data and checks data against it. The schemas are the published contract for
// clients in other languages: the $id of each is the dataschema attribute
// (events.Kind.DataSchema) of the kind's events.
package schema

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/openrath/rath/pkg/events"
)

// files holds one schema per event kind, named by events.Kind.Schema.
//
//go:embed schemas/*.json
var files embed.FS

// ValidationError reports event data that does not match its kind's schema.
// Validate returns it for every fault of the data itself, including data that
// is not JSON.
type ValidationError struct {
	// Type is the CloudEvents type the data was checked against.
	Type string
	// Problems lists every failing value, ordered by JSON pointer.
	Problems []Problem
}

// Problem is one reason event data fails its schema.
type Problem struct {
	// Pointer is the RFC 6901 JSON pointer of the failing value within the
	// data; "" is the data as a whole.
	Pointer string
	// Message says why the value fails.
	Message string
}

// Error names the type and every failing pointer with its reason, for example
// `data of rath.conversation.chunk.appended: /role: value must be one of ...`.
func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString("data of ")
	b.WriteString(e.Type)
	for i, p := range e.Problems {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		if p.Pointer != "" {
			b.WriteString(p.Pointer)
			b.WriteString(": ")
		}
		b.WriteString(p.Message)
	}
	return b.String()
}

// compiled maps each registered type to its compiled schema. Compiling once,
// on first use, keeps Validate to a decode and a walk of the data.
var compiled = sync.OnceValues(compile)

func compile() (map[string]*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	kinds := events.Kinds()
	for _, k := range kinds {
		raw, err := files.ReadFile(path.Join("schemas", k.Schema))
		if err != nil {
			return nil, fmt.Errorf("schema of %s: %w", k.Type, err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("schema of %s: %w", k.Type, err)
		}
		if err := c.AddResource(k.DataSchema(), doc); err != nil {
			return nil, fmt.Errorf("schema of %s: %w", k.Type, err)
		}
	}
	out := make(map[string]*jsonschema.Schema, len(kinds))
	for _, k := range kinds {
		sch, err := c.Compile(k.DataSchema())
		if err != nil {
			return nil, fmt.Errorf("compile schema of %s: %w", k.Type, err)
		}
		out[k.Type] = sch
	}
	return out, nil
}

// Validate checks the JSON data of an event of type typ against the kind's
// schema. It returns a *ValidationError if the data does not match and an
// error wrapping *events.UnknownTypeError if typ is not registered. Empty data
// stands for the empty object, as in events.DecodeData: it is valid only for
// kinds without required properties.
func Validate(typ string, data []byte) error {
	schemas, err := compiled()
	if err != nil {
		return err
	}
	sch, ok := schemas[typ]
	if !ok {
		return fmt.Errorf("validate data: %w", &events.UnknownTypeError{Type: typ})
	}
	if len(data) == 0 {
		if sch.Validate(map[string]any{}) != nil {
			return &ValidationError{Type: typ, Problems: []Problem{{Message: "data is required"}}}
		}
		return nil
	}
	v, ok := decode(data)
	if !ok {
		if v, err = jsonschema.UnmarshalJSON(bytes.NewReader(data)); err != nil {
			return &ValidationError{Type: typ, Problems: []Problem{{Message: "invalid JSON: " + err.Error()}}}
		}
	}
	err = sch.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return fmt.Errorf("validate %s data: %w", typ, err)
	}
	return &ValidationError{Type: typ, Problems: problems(ve)}
}

// Raw returns the JSON Schema of the data of events of type typ, as published.
// The slice is a copy the caller may keep.
func Raw(typ string) ([]byte, bool) {
	k, ok := events.Lookup(typ)
	if !ok {
		return nil, false
	}
	b, err := files.ReadFile(path.Join("schemas", k.Schema))
	if err != nil {
		return nil, false
	}
	return b, true
}

// List returns the types that have a schema, sorted.
func List() []string {
	var out []string
	for _, k := range events.Kinds() {
		if _, err := fs.Stat(files, path.Join("schemas", k.Schema)); err == nil {
			out = append(out, k.Type)
		}
	}
	return out
}

var printer = message.NewPrinter(language.English)

// problems flattens the library's error tree into its leaves. Missing and
// unknown properties are reported at the property's own pointer, so that a
// message names the field a client has to fix.
func problems(root *jsonschema.ValidationError) []Problem {
	var out []Problem
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		at := pointer(e.InstanceLocation)
		switch k := e.ErrorKind.(type) {
		case *kind.Required:
			for _, name := range k.Missing {
				out = append(out, Problem{at + "/" + escape(name), "required property is missing"})
			}
		case *kind.AdditionalProperties:
			for _, name := range k.Properties {
				out = append(out, Problem{at + "/" + escape(name), "property is not allowed"})
			}
		default:
			out = append(out, Problem{at, describe(e.ErrorKind)})
		}
	}
	walk(root)
	slices.SortStableFunc(out, func(a, b Problem) int {
		if c := strings.Compare(a.Pointer, b.Pointer); c != 0 {
			return c
		}
		return strings.Compare(a.Message, b.Message)
	})
	return out
}

// describe words the failures our schemas can produce for people who read
// JSON, not Go; anything else keeps the library's wording.
func describe(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			b, _ := json.Marshal(w)
			want[i] = string(b)
		}
		return "value must be one of " + strings.Join(want, ", ")
	case *kind.Type:
		return fmt.Sprintf("value must be of type %s, got %s", strings.Join(k.Want, " or "), k.Got)
	case *kind.MinLength:
		if k.Want == 1 {
			return "value must not be empty"
		}
		return fmt.Sprintf("value must be at least %d characters long", k.Want)
	case *kind.Minimum:
		return fmt.Sprintf("value must be at least %s, got %s", k.Want.RatString(), k.Got.RatString())
	case *kind.Pattern:
		return fmt.Sprintf("value must match pattern %q", k.Want)
	}
	return k.LocalizedString(printer)
}

func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escape(t))
	}
	return b.String()
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// escape escapes one JSON pointer token (RFC 6901).
func escape(token string) string { return pointerEscaper.Replace(token) }
