package events_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
)

func TestRegistry(t *testing.T) {
	tokens := []string{
		events.TokenLifecycle, events.TokenConversation, events.TokenModel,
		events.TokenTool, events.TokenMemory, events.TokenControl, events.TokenAgent,
	}
	kinds := events.Kinds()
	if len(kinds) == 0 {
		t.Fatal("no kinds registered")
	}
	if !slices.IsSortedFunc(kinds, func(a, b events.Kind) int { return strings.Compare(a.Type, b.Type) }) {
		t.Error("Kinds is not sorted by type")
	}
	seen := map[string]bool{}
	for _, k := range kinds {
		if seen[k.Type] {
			t.Errorf("type %s listed twice", k.Type)
		}
		seen[k.Type] = true
		if !strings.HasPrefix(k.Type, "rath.") {
			t.Errorf("type %s lacks the rath. prefix", k.Type)
		}
		if !slices.Contains(tokens, k.Token) {
			t.Errorf("%s: token %q is not a Token* constant", k.Type, k.Token)
		}
		if want := strings.TrimPrefix(k.Type, "rath.") + ".v1.json"; k.Schema != want {
			t.Errorf("%s: schema %q, want %q", k.Type, k.Schema, want)
		}
		if want := "urn:rath:schema:" + k.Schema; k.DataSchema() != want {
			t.Errorf("%s: dataschema %q, want %q", k.Type, k.DataSchema(), want)
		}
		if got, ok := events.Lookup(k.Type); !ok || got != k {
			t.Errorf("Lookup(%s) = %v, %v", k.Type, got, ok)
		}
		if got, ok := events.KindOf(k.New()); !ok || got != k {
			t.Errorf("KindOf(%s.New()) = %v, %v", k.Type, got, ok)
		}
	}
}

func TestDecodeDataUnknownType(t *testing.T) {
	_, err := events.DecodeData("rath.no.such.kind", []byte(`{}`))
	var ute *events.UnknownTypeError
	if !errors.As(err, &ute) || ute.Type != "rath.no.such.kind" {
		t.Fatalf("DecodeData of unknown type: got %v, want *UnknownTypeError", err)
	}
}

// TestRoundTrip builds an event of every kind with New and reads its data back
// with Data, directly and through the structured wire form.
func TestRoundTrip(t *testing.T) {
	for _, k := range events.Kinds() {
		t.Run(k.Type, func(t *testing.T) {
			ex, ok := examples[k.Type]
			if !ok {
				t.Fatalf("no example for %s", k.Type)
			}
			e, err := events.New(exampleSession, ex, events.WithCorrelation("turn_01JDQ9A0"))
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Validate(); err != nil {
				t.Fatalf("invalid CloudEvent: %v", err)
			}
			if e.Type() != k.Type || e.DataSchema() != k.DataSchema() || e.Subject() != exampleSession {
				t.Errorf("type %q dataschema %q subject %q", e.Type(), e.DataSchema(), e.Subject())
			}
			got, err := events.Data(e)
			if err != nil {
				t.Fatal(err)
			}
			if v := reflect.ValueOf(got).Elem().Interface(); !reflect.DeepEqual(v, ex) {
				t.Errorf("Data = %#v, want %#v", v, ex)
			}

			body, err := events.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			back, err := events.Unmarshal(body)
			if err != nil {
				t.Fatal(err)
			}
			got, err = events.Data(back)
			if err != nil {
				t.Fatal(err)
			}
			if v := reflect.ValueOf(got).Elem().Interface(); !reflect.DeepEqual(v, ex) {
				t.Errorf("Data after Marshal/Unmarshal = %#v, want %#v", v, ex)
			}
			if events.Correlation(back) != "turn_01JDQ9A0" {
				t.Errorf("correlation %q lost in the wire form", events.Correlation(back))
			}
		})
	}
}
