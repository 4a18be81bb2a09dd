package domainstate

import (
	"errors"
	"strings"
	"testing"
)

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		name, expected, actual string
		want                   []string
	}{
		{"same, other order and spacing", `{"a":1,"b":{"c":[1,2]}}`, `{ "b": {"c": [1, 2]}, "a": 1 }`, nil},
		{"numbers by value", `{"total":45,"x":1e2}`, `{"total":45.0,"x":100}`, nil},
		{"changed value", `{"orders":{"W1":{"status":"cancelled"}}}`, `{"orders":{"W1":{"status":"pending"}}}`,
			[]string{`/orders/W1/status: expected "cancelled", got "pending"`}},
		{"missing and extra keys", `{"a":1,"b":2}`, `{"b":2,"c":3}`,
			[]string{`/a: expected 1, missing`, `/c: not expected, got 3`}},
		{"null is not missing", `{"a":null}`, `{}`, []string{`/a: expected null, missing`}},
		{"array lengths", `[1,2,3]`, `[1]`, []string{`/1: expected 2, missing`, `/2: expected 3, missing`}},
		{"kinds differ", `{"a":{"b":1}}`, `{"a":[1]}`, []string{`/a: expected {"b":1}, got [1]`}},
		{"number vs string", `{"a":1}`, `{"a":"1"}`, []string{`/a: expected 1, got "1"`}},
		{"root scalar", `1`, `2`, []string{`/: expected 1, got 2`}},
		{"keys escaped", `{"a/b":{"~":1}}`, `{"a/b":{"~":2}}`, []string{`/a~1b/~0: expected 1, got 2`}},
		{"large integers exact", `{"id":12345678901234567890}`, `{"id":12345678901234567891}`,
			[]string{`/id: expected 12345678901234567890, got 12345678901234567891`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds, err := Compare([]byte(tc.expected), []byte(tc.actual))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range ds {
				got = append(got, d.String())
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestCompareRefusesWhatIsNotJSON(t *testing.T) {
	for _, tc := range []struct{ name, expected, actual, want string }{
		{"empty expected", ``, `{}`, "expected state: not a JSON document"},
		{"broken actual", `{}`, `{"a":`, "actual state: not a JSON document"},
		{"two values", `{} {}`, `{}`, "expected state: not a JSON document: more than one value"},
		{"trailing garbage", `{}`, `{}]`, "actual state: not a JSON document"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compare([]byte(tc.expected), []byte(tc.actual))
			if !errors.Is(err, ErrNotJSON) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want ErrNotJSON saying %q", err, tc.want)
			}
		})
	}
}

func TestChanges(t *testing.T) {
	cs, err := Changes([]byte(`{"o":{"status":"pending","refunded":0}}`), []byte(`{"o":{"status":"cancelled","refunded":0,"reason":"no longer needed"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || cs[0].Path != "/o/reason" || cs[0].Before != nil || string(cs[0].After) != `"no longer needed"` ||
		cs[1].Path != "/o/status" || string(cs[1].Before) != `"pending"` || string(cs[1].After) != `"cancelled"` {
		t.Fatalf("changes %+v", cs)
	}
}
