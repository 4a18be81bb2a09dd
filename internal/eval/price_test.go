package eval

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/session"
)

func TestParsePrices(t *testing.T) {
	p, err := ParsePrices([]byte(`
currency: EUR
prices:
  - {provider: anthropic, model: claude-sonnet-4-5, input: 3, output: 15}
  - {provider: openai, model: "*", input: 2.5, output: 10}
  - {provider: openai, model: gpt-4.1-mini, input: 0.4, output: 1.6}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := &Prices{Currency: "EUR", Prices: []Price{
		{"anthropic", "claude-sonnet-4-5", 3, 15}, {"openai", "*", 2.5, 10}, {"openai", "gpt-4.1-mini", 0.4, 1.6},
		{ProviderScripted, "*", 0, 0}, // scripted models are free unless the table says otherwise
	}}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("got %+v\nwant %+v", p, want)
	}
	for key, want := range map[string]Price{
		"openai/gpt-4.1-mini":         {"openai", "gpt-4.1-mini", 0.4, 1.6}, // its own price before its provider's *
		"openai/gpt-4.1":              {"openai", "*", 2.5, 10},
		"anthropic/claude-sonnet-4-5": {"anthropic", "claude-sonnet-4-5", 3, 15},
		"scripted/scripted-1":         {ProviderScripted, "*", 0, 0},
	} {
		if got, ok := p.Lookup(key); !ok || got != want {
			t.Errorf("Lookup(%s) = %+v, %v; want %+v", key, got, ok, want)
		}
	}
	for _, key := range []string{"anthropic/claude-opus-4", "gpt-4.1", "mistral/x"} {
		if got, ok := p.Lookup(key); ok {
			t.Errorf("Lookup(%s) = %+v, want no price", key, got)
		}
	}

	// A table that prices scripted models keeps its price.
	p, err = ParsePrices([]byte(`{"currency": "USD", "prices": [{"provider": "scripted", "model": "scripted-1", "input": 1, "output": 2}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := p.Lookup("scripted/scripted-1"); got.Input != 1 || len(p.Prices) != 1 {
		t.Errorf("a priced scripted model: %+v", p.Prices)
	}
	if _, ok := p.Lookup("scripted/other"); ok {
		t.Errorf("a scripted model the table does not name has a price: %+v", p.Prices)
	}
}

// The example table docs/eval.md points to loads, and prices what it names.
func TestExamplePrices(t *testing.T) {
	p, err := LoadPrices("../../examples/eval/prices.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := p.Lookup("anthropic/claude-sonnet-4-5"); p.Currency != "USD" || !ok || got.Input != 3 || got.Output != 15 {
		t.Errorf("examples/eval/prices.yaml: %+v", p)
	}
}

func TestParsePricesRefuses(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"empty", "", "empty"},
		{"unknown key", "currency: USD\nprices: [{provider: a, model: b, input: 1, ouptut: 2}]", "field ouptut not found"},
		{"no currency", "prices: [{provider: a, model: b, input: 1, output: 2}]", `currency: "": want a name`},
		{"no prices", "currency: USD", "prices: none"},
		{"missing output", "currency: USD\nprices: [{provider: a, model: b, input: 1}]", "prices[0].output: missing"},
		{"negative", "currency: USD\nprices: [{provider: a, model: b, input: -1, output: 0}]", "prices[0].input: -1: a price is a number at least 0"},
		{"no provider", "currency: USD\nprices: [{model: b, input: 1, output: 0}]", "prices[0].provider"},
		{"no model", "currency: USD\nprices: [{provider: a, input: 1, output: 0}]", "prices[0].model: missing"},
		{"twice", "currency: USD\nprices: [{provider: a, model: b, input: 1, output: 0}, {provider: a, model: b, input: 2, output: 0}]", "prices[1]: a/b is priced twice"},
		{"not a number", "currency: USD\nprices: [{provider: a, model: b, input: cheap, output: 0}]", "invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParsePrices([]byte(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParsePrices = %+v, %v; want an error with %q", p, err, tc.want)
			}
		})
	}
	path := filepath.Join(t.TempDir(), "prices.yaml")
	if err := os.WriteFile(path, []byte("currency: USD\nprices: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPrices(path); err == nil || !strings.Contains(err.Error(), "price table "+path+": prices: none") {
		t.Errorf("LoadPrices names no file: %v", err)
	}
}

func TestCost(t *testing.T) {
	p := &Prices{Currency: "USD", Prices: []Price{{"anthropic", "claude", 3, 15}, {ProviderScripted, "*", 0, 0}}}
	for _, tc := range []struct {
		name    string
		usage   map[string]session.Tokens
		cost    float64
		noPrice []string
	}{
		{"no usage", nil, 0, nil},
		{"scripted is free", map[string]session.Tokens{"scripted/scripted-1": {In: 5000, Out: 300}}, 0, nil},
		// 2M in at 3 and 100k out at 15 per million: 6 + 1.5.
		{"priced", map[string]session.Tokens{"anthropic/claude": {In: 2_000_000, Out: 100_000}, "scripted/s": {In: 9, Out: 9}}, 7.5, nil},
		{"one model without a price", map[string]session.Tokens{"anthropic/claude": {In: 1, Out: 1}, "openai/gpt": {In: 1}, "bare": {In: 1}}, 0.000018, []string{"bare", "openai/gpt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cost, noPrice := p.Cost(tc.usage)
			if diff := cost - tc.cost; diff > 1e-12 || diff < -1e-12 || !reflect.DeepEqual(noPrice, tc.noPrice) {
				t.Errorf("Cost = %v, %v; want %v, %v", cost, noPrice, tc.cost, tc.noPrice)
			}
		})
	}
}

// A run with a model without a price has no cost, and neither has any
// summary over it: the model is named instead.
func TestSummaryCost(t *testing.T) {
	p := &Prices{Currency: "USD", Prices: []Price{{"a", "m", 1_000_000, 0}}}
	priced := func(try int, in int64, model string) Run {
		r := Run{Try: try, Models: map[string]session.Tokens{model: {In: in}}}
		r.price(p)
		return r
	}
	runs := []Run{priced(1, 2, "a/m"), priced(2, 3, "a/m")}
	if s := Summarize(runs); s.Cost == nil || *s.Cost != 5 || s.NoPrice != nil {
		t.Errorf("priced runs: cost %v, no price %v", Money(s.Cost), s.NoPrice)
	}
	if c, ok := Summarize(runs).CostPerRun(); !ok || c != 2.5 {
		t.Errorf("cost per run %v, %v", c, ok)
	}
	mixed := []Run{priced(1, 2, "a/m"), priced(2, 3, "b/x"), priced(3, 3, "b/x")}
	if mixed[1].Cost != nil || !reflect.DeepEqual(mixed[1].NoPrice, []string{"b/x"}) {
		t.Errorf("a run without a price: %+v", mixed[1])
	}
	s := Summarize(mixed)
	if s.Cost != nil || !reflect.DeepEqual(s.NoPrice, []string{"b/x"}) || Money(s.Cost) != "no price" {
		t.Errorf("a task with a run without a price: cost %v, no price %v", Money(s.Cost), s.NoPrice)
	}
	if _, ok := s.CostPerRun(); ok {
		t.Error("a task without a cost has a cost per run")
	}
	o := Overall([]TaskReport{{Summary: Summarize(runs), Runs: runs}, {Summary: s, Runs: mixed}})
	if o.Cost != nil || !reflect.DeepEqual(o.NoPrice, []string{"b/x"}) {
		t.Errorf("overall: cost %v, no price %v", Money(o.Cost), o.NoPrice)
	}
}
