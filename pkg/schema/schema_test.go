package schema_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/schema"
)

// TestFilesMatchKinds checks that every registered kind has a schema and every
// schema file belongs to a kind.
func TestFilesMatchKinds(t *testing.T) {
	entries, err := os.ReadDir("schemas")
	if err != nil {
		t.Fatal(err)
	}
	bySchema := map[string]events.Kind{}
	for _, k := range events.Kinds() {
		bySchema[k.Schema] = k
	}
	onDisk := map[string]bool{}
	for _, e := range entries {
		onDisk[e.Name()] = true
		if _, ok := bySchema[e.Name()]; !ok {
			t.Errorf("schemas/%s belongs to no registered kind", e.Name())
		}
	}
	var types []string
	for name, k := range bySchema {
		types = append(types, k.Type)
		if !onDisk[name] {
			t.Errorf("%s has no schema file schemas/%s", k.Type, name)
		}
	}
	slices.Sort(types)
	if got := schema.List(); !slices.Equal(got, types) {
		t.Errorf("List() = %v, want %v", got, types)
	}
}

// TestSchemasMatchGoTypes checks each schema against its kind's Go type: the
// same property names at every level, required exactly where the JSON tag has
// no omitempty, and the header and documentation that clients rely on.
func TestSchemasMatchGoTypes(t *testing.T) {
	for _, k := range events.Kinds() {
		t.Run(k.Type, func(t *testing.T) {
			raw, ok := schema.Raw(k.Type)
			if !ok {
				t.Fatalf("Raw(%s) found nothing", k.Type)
			}
			var doc map[string]any
			if err := json.Unmarshal(raw, &doc); err != nil {
				t.Fatal(err)
			}
			if doc["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
				t.Errorf("$schema = %v, want draft 2020-12", doc["$schema"])
			}
			if doc["$id"] != k.DataSchema() {
				t.Errorf("$id = %v, want %s", doc["$id"], k.DataSchema())
			}
			if doc["title"] == nil || doc["description"] == nil {
				t.Error("schema lacks a title or a description")
			}
			compareObject(t, "data", doc, reflect.TypeOf(k.New()).Elem())
		})
	}
}

func compareObject(t *testing.T, at string, sch map[string]any, typ reflect.Type) {
	t.Helper()
	if sch["type"] != "object" || sch["additionalProperties"] != false {
		t.Errorf("%s: want type object with additionalProperties false", at)
	}
	props, _ := sch["properties"].(map[string]any)
	var required []string
	for _, r := range asSlice(sch["required"]) {
		required = append(required, r.(string))
	}
	var wantProps, wantRequired []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		wantProps = append(wantProps, name)
		if !strings.Contains(opts, "omitempty") {
			wantRequired = append(wantRequired, name)
		}
		p, ok := props[name].(map[string]any)
		if !ok {
			continue
		}
		if p["title"] == nil || p["description"] == nil {
			t.Errorf("%s/%s lacks a title or a description", at, name)
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct:
			compareObject(t, at+"/"+name, p, ft)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			items, _ := p["items"].(map[string]any)
			compareObject(t, at+"/"+name+"/items", items, ft.Elem())
		}
	}
	var gotProps []string
	for name := range props {
		gotProps = append(gotProps, name)
	}
	slices.Sort(gotProps)
	slices.Sort(wantProps)
	slices.Sort(required)
	slices.Sort(wantRequired)
	if !slices.Equal(gotProps, wantProps) {
		t.Errorf("%s: properties %v, Go fields %v", at, gotProps, wantProps)
	}
	if !slices.Equal(required, wantRequired) {
		t.Errorf("%s: required %v, Go fields without omitempty %v", at, required, wantRequired)
	}
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// TestGoldenFilesValid validates every golden wire file of pkg/events, as
// stored and as the Go type marshals it.
func TestGoldenFilesValid(t *testing.T) {
	for _, k := range events.Kinds() {
		t.Run(k.Type, func(t *testing.T) {
			golden, err := os.ReadFile(filepath.Join("..", "events", "testdata", k.Schema))
			if err != nil {
				t.Fatal(err)
			}
			if err := schema.Validate(k.Type, golden); err != nil {
				t.Errorf("golden file: %v", err)
			}
			v, err := events.DecodeData(k.Type, golden)
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if err := schema.Validate(k.Type, b); err != nil {
				t.Errorf("marshalled Go value: %v", err)
			}
		})
	}
}

// TestOldWireFormsValid validates the earlier wire forms pkg/events keeps
// in testdata/old: a schema may grow optional fields, never refuse what it
// accepted before.
func TestOldWireFormsValid(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "events", "testdata", "old", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no old wire forms: %v", err)
	}
	for _, file := range files {
		for _, k := range events.Kinds() {
			if k.Schema != filepath.Base(file) {
				continue
			}
			old, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := schema.Validate(k.Type, old); err != nil {
				t.Errorf("%s: %v", file, err)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	const hash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	tests := []struct {
		name, typ, data string
		want            string // error text; "" for valid data
	}{
		{"chunk", events.TypeChunkAppended, `{"role":"user","content":"fix the test"}`, ""},
		{"chunk empty content", events.TypeChunkAppended, `{"role":"assistant","content":""}`, ""},
		{"chunk bad role", events.TypeChunkAppended, `{"role":"bot","content":"hi"}`,
			`data of rath.conversation.chunk.appended: /role: value must be one of "system", "user", "assistant", "tool"`},
		{"chunk missing fields", events.TypeChunkAppended, `{"agent":"coder"}`,
			`data of rath.conversation.chunk.appended: /content: required property is missing; /role: required property is missing`},
		{"chunk unknown field", events.TypeChunkAppended, `{"role":"user","content":"hi","Role":"user"}`,
			`data of rath.conversation.chunk.appended: /Role: property is not allowed`},
		{"chunk empty data", events.TypeChunkAppended, ``,
			`data of rath.conversation.chunk.appended: data is required`},
		{"chunk not an object", events.TypeChunkAppended, `["user","hi"]`,
			`data of rath.conversation.chunk.appended: value must be of type object, got array`},
		{"chunk not JSON", events.TypeChunkAppended, `{"role":`,
			`data of rath.conversation.chunk.appended: invalid JSON: unexpected EOF`},

		{"paused empty data", events.TypeSessionPaused, ``, ""},
		{"paused", events.TypeSessionPaused, `{"reason":"review"}`, ""},
		{"started labels", events.TypeSessionStarted, `{"labels":{"team":"core"}}`, ""},
		{"started bad label", events.TypeSessionStarted, `{"labels":{"team":7}}`,
			`data of rath.session.started: /labels/team: value must be of type string, got number`},

		{"forked", events.TypeSessionForked, `{"parent":"s-1","at_seq":4,"parent_hash":"` + hash + `"}`, ""},
		{"forked bad", events.TypeSessionForked, `{"parent":"a.b","at_seq":-1,"parent_hash":"ABC"}`,
			`data of rath.session.forked: /at_seq: value must be at least 1, got -1; ` +
				`/parent: value must match pattern "^[A-Za-z0-9_-]{1,128}$"; ` +
				`/parent_hash: value must match pattern "^[0-9a-f]{64}$"`},

		{"model called", events.TypeModelCalled, `{"agent":"coder","provider":"anthropic","model":"m","tokens_in":0,"tokens_out":0,"latency_ms":12}`, ""},
		{"model called bad tokens", events.TypeModelCalled, `{"agent":"coder","provider":"","model":"m","tokens_in":1.5,"tokens_out":-3,"latency_ms":12}`,
			`data of rath.model.called: /provider: value must not be empty; /tokens_in: value must be of type integer, got number; /tokens_out: value must be at least 0, got -3`},

		{"tool requested any arguments", events.TypeToolRequested, `{"call_id":"c1","tool":"shell","arguments":["ls",1,null]}`, ""},
		{"tool requested no call id", events.TypeToolRequested, `{"call_id":"","tool":"shell"}`,
			`data of rath.tool.call.requested: /call_id: value must not be empty`},
		{"tool requested caller-run", events.TypeToolRequested, `{"call_id":"c1","tool":"lookup","runner":"caller"}`, ""},
		{"tool requested unknown runner", events.TypeToolRequested, `{"call_id":"c1","tool":"lookup","runner":"someone"}`,
			`data of rath.tool.call.requested: /runner: value must be one of "caller"`},
		{"tool requested empty runner", events.TypeToolRequested, `{"call_id":"c1","tool":"lookup","runner":""}`,
			`data of rath.tool.call.requested: /runner: value must be one of "caller"`},
		{"tool requested runner not a string", events.TypeToolRequested, `{"call_id":"c1","tool":"lookup","runner":true}`,
			`data of rath.tool.call.requested: /runner: value must be of type string, got boolean`},
		{"tool started sandbox", events.TypeToolStarted, `{"call_id":"c1","tool":"shell","attempt":1,"sandbox":{"backend":"docker"}}`,
			`data of rath.tool.call.started: /sandbox/sandbox_id: required property is missing`},
		{"tool completed", events.TypeToolCompleted, `{"call_id":"c1","tool":"shell","exit_code":-1,"duration_ms":3}`, ""},

		{"memory written", events.TypeMemoryWritten, `{"item_id":"m1","version":1,"content":"x","scope":"project","provenance":{"session":"s1","evidence":"human_correction"}}`, ""},
		{"memory written bad enums", events.TypeMemoryWritten, `{"item_id":"m1","version":1,"content":"x","scope":"global","provenance":{"session":"s1","evidence":"hunch"}}`,
			`data of rath.memory.written: /provenance/evidence: value must be one of "tool_result", "human_correction", "failed_attempt", "validation_signal", "other"; ` +
				`/scope: value must match pattern "^(user|agent|project|workflow|session)(:[A-Za-z0-9_-][A-Za-z0-9._@/+-]{0,127})?$"`},
		{"memory recalled nothing", events.TypeMemoryRecalled, `{"query":"q","items":null}`, ""},
		{"memory recalled bad item", events.TypeMemoryRecalled, `{"query":"q","items":[{"item_id":"m1","version":0}]}`,
			`data of rath.memory.recalled: /items/0/version: value must be at least 1, got 0`},

		{"validation details any", events.TypeValidationFailed, `{"validator":"lint","reason":"2 issues","details":"see log"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := schema.Validate(tt.typ, []byte(tt.data))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var ve *schema.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate: got %v, want a *ValidationError", err)
			}
			if ve.Type != tt.typ {
				t.Errorf("Type = %q, want %q", ve.Type, tt.typ)
			}
			if err.Error() != tt.want {
				t.Errorf("Validate:\n got %s\nwant %s", err, tt.want)
			}
		})
	}
}

func TestValidateUnknownType(t *testing.T) {
	err := schema.Validate("rath.no.such.kind", []byte(`{}`))
	var ute *events.UnknownTypeError
	if !errors.As(err, &ute) || ute.Type != "rath.no.such.kind" {
		t.Fatalf("Validate: got %v, want an *events.UnknownTypeError", err)
	}
	if _, ok := schema.Raw("rath.no.such.kind"); ok {
		t.Error("Raw found a schema for an unknown type")
	}
}
