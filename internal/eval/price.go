package eval

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/openrath/rath/internal/workflow/parse"
	"github.com/openrath/rath/pkg/session"
)

// ProviderScripted is the provider of scripted models, which cost nothing:
// every price table prices its models at 0 unless it names them itself.
const ProviderScripted = "scripted"

// DefaultCurrency is the currency of the price table rath eval uses when
// no --prices file is given, in which only scripted models have a price.
const DefaultCurrency = "USD"

// Price is what one provider's model costs, per million tokens, in the
// table's currency. Model "*" prices every model of the provider that has
// no price of its own.
type Price struct {
	Provider string  `yaml:"provider" json:"provider"`
	Model    string  `yaml:"model" json:"model"`
	Input    float64 `yaml:"input" json:"input"`
	Output   float64 `yaml:"output" json:"output"`
}

// key is the usage key the price matches: "provider/model", as
// session.Usage keys ByModel.
func (p Price) key() string { return p.Provider + "/" + p.Model }

// Prices is a price table (docs/eval.md, "Cost"): a currency and the price
// of each provider's models in it.
type Prices struct {
	// File is the table's file as named ("" for the default table).
	File     string
	Currency string
	Prices   []Price
}

// DefaultPrices is the table without a file: scripted models are free,
// every other model has no price.
func DefaultPrices() *Prices {
	return &Prices{Currency: DefaultCurrency, Prices: []Price{{Provider: ProviderScripted, Model: "*"}}}
}

// LoadPrices reads a price table: YAML (or JSON, which is YAML too) with
// currency and prices, each with provider, model, input and output (per
// million tokens). Every problem is reported, each naming its entry.
func LoadPrices(path string) (*Prices, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load price table: %w", err)
	}
	p, err := ParsePrices(data)
	if err != nil {
		return nil, fmt.Errorf("price table %s: %w", path, err)
	}
	p.File = path
	return p, nil
}

// ParsePrices is LoadPrices on the file's contents. Unknown keys are
// refused, so a misspelt key never silently means "free"; a scripted
// "*" price is added unless the table prices scripted models itself.
func ParsePrices(data []byte) (*Prices, error) {
	var raw struct {
		Currency string `yaml:"currency"`
		Prices   []struct {
			Provider string   `yaml:"provider"`
			Model    string   `yaml:"model"`
			Input    *float64 `yaml:"input"`
			Output   *float64 `yaml:"output"`
		} `yaml:"prices"`
	}
	if err := parse.Strict(data, &raw); errors.Is(err, parse.ErrEmpty) {
		return nil, errors.New("empty: it needs a currency and prices")
	} else if err != nil {
		return nil, fmt.Errorf("invalid: %w", err)
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	p := &Prices{Currency: raw.Currency}
	if p.Currency == "" || strings.ContainsAny(p.Currency, " \t\n") {
		bad("currency: %q: want a name without spaces, such as USD or EUR", p.Currency)
	}
	seen := map[string]bool{}
	scripted := false
	for i, e := range raw.Prices {
		at := fmt.Sprintf("prices[%d]", i)
		switch {
		case e.Provider == "" || strings.Contains(e.Provider, "/"):
			bad("%s.provider: %q: want the provider's name, as a workflow's agent names it", at, e.Provider)
		case e.Model == "":
			bad("%s.model: missing: want the model's name, or \"*\" for every model of %s", at, e.Provider)
		}
		for _, f := range []struct {
			name string
			v    *float64
		}{{"input", e.Input}, {"output", e.Output}} {
			switch {
			case f.v == nil:
				bad("%s.%s: missing: the price per million %s tokens (0 for free)", at, f.name, f.name)
			case *f.v < 0 || math.IsNaN(*f.v) || math.IsInf(*f.v, 0):
				bad("%s.%s: %v: a price is a number at least 0", at, f.name, *f.v)
			}
		}
		pr := Price{Provider: e.Provider, Model: e.Model, Input: deref(e.Input), Output: deref(e.Output)}
		if seen[pr.key()] {
			bad("%s: %s is priced twice", at, pr.key())
		}
		seen[pr.key()] = true
		scripted = scripted || e.Provider == ProviderScripted
		p.Prices = append(p.Prices, pr)
	}
	if len(raw.Prices) == 0 {
		bad("prices: none: list at least one provider and model")
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	if !scripted {
		p.Prices = append(p.Prices, Price{Provider: ProviderScripted, Model: "*"})
	}
	return p, nil
}

func deref(f *float64) float64 {
	if f == nil {
		return 0
	}
	return *f
}

// Lookup returns the price of a usage key ("provider/model", as
// session.Usage.ByModel keys it): the model's own price, else its
// provider's "*". A key without a provider has no price.
func (p *Prices) Lookup(key string) (Price, bool) {
	provider, _, ok := strings.Cut(key, "/")
	if !ok {
		return Price{}, false
	}
	if i := slices.IndexFunc(p.Prices, func(pr Price) bool { return pr.key() == key }); i >= 0 {
		return p.Prices[i], true
	}
	if i := slices.IndexFunc(p.Prices, func(pr Price) bool { return pr.Provider == provider && pr.Model == "*" }); i >= 0 {
		return p.Prices[i], true
	}
	return Price{}, false
}

// Cost prices a session's usage by model: the sum of each model's input
// and output tokens at its price, and the models (sorted) that have no
// price. A usage with a model without a price has no cost: the caller
// shows noPrice rather than a sum that leaves it out.
func (p *Prices) Cost(byModel map[string]session.Tokens) (cost float64, noPrice []string) {
	// Summed in key order, so that the same usage always sums to the
	// same float.
	for _, key := range slices.Sorted(maps.Keys(byModel)) {
		t := byModel[key]
		pr, ok := p.Lookup(key)
		if !ok {
			noPrice = append(noPrice, key)
			continue
		}
		cost += (float64(t.In)*pr.Input + float64(t.Out)*pr.Output) / 1e6
	}
	return cost, noPrice
}
