package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/openrath/rath/services/tool-runner/internal/tools"
)

// An experiment runs its command like run and says, first, what its report
// recorded.
func TestExperiment(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t, map[string]string{"a.txt": "a\n"})
	out := call(t, ws, tools.Experiment, `{"name": "e1", "command": ["sh", "-c", "echo training; echo '{\"config\": {\"k\": 3}, \"metrics\": {\"acc\": 0.75}}'"]}`)
	if out.ExitCode != 0 || !strings.HasPrefix(out.Result, "experiment e1 recorded: acc=0.75\nexit code 0") {
		t.Errorf("experiment: %+v", out)
	}
	out = call(t, ws, tools.Experiment, `{"name": "e2", "command": ["sh", "-c", "echo nothing; exit 4"]}`)
	if out.ExitCode != 4 || !strings.HasPrefix(out.Result, "experiment e2 recorded (no report: the last line of stdout is not a JSON object with config and metrics)") {
		t.Errorf("experiment without a report: %+v", out)
	}
	for _, bad := range []string{
		`{"command": ["true"]}`,
		`{"name": "", "command": ["true"]}`,
		`{"name": "x", "command": []}`,
		`{"name": "x", "command": ["true"], "config": {}}`,
	} {
		_, err := tools.Call(context.Background(), ws, tools.Experiment, json.RawMessage(bad))
		var ae *tools.ArgError
		if !errors.As(err, &ae) {
			t.Errorf("%s: %v, want an argument error", bad, err)
		}
	}
}

// ParseReport takes what it can use from the last line of stdout and says
// what it could not, whatever a program prints.
func TestParseReport(t *testing.T) {
	t.Parallel()
	many := map[string]float64{}
	for i := range tools.MaxMetrics + 5 {
		many[strings.Repeat("m", i+1)] = float64(i)
	}
	manyJSON, _ := json.Marshal(map[string]any{"metrics": many})
	for _, tc := range []struct {
		name, stdout string
		config       string
		metrics      map[string]float64
		problem      string
	}{
		{"ok", "log line\n{\"config\": {\"b\": 1, \"a\": [2]}, \"metrics\": {\"r2\": 0.5, \"loss\": 3}}\n\n", `{"b":1,"a":[2]}`, map[string]float64{"r2": 0.5, "loss": 3}, ""},
		{"empty", "", "", nil, "no report: stdout is empty"},
		{"blank", "\n  \n", "", nil, "no report: stdout is empty"},
		{"not JSON", "done\n", "", nil, "no report: the last line of stdout is not a JSON object with config and metrics"},
		{"an array", "[1, 2]\n", "", nil, "no report: the last line of stdout is not a JSON object with config and metrics"},
		{"two objects", `{"metrics": {"a": 1}} {"metrics": {"b": 2}}`, "", nil, "no report: the last line of stdout is not a JSON object with config and metrics"},
		{"no metrics", `{"config": {"k": 1}}`, `{"k":1}`, nil, "the report has no metrics"},
		{"config not an object", `{"config": "fast", "metrics": {"a": 1}}`, "", map[string]float64{"a": 1}, "config is not a JSON object: left out"},
		{"strings and nulls", `{"metrics": {"a": "1", "b": null, "c": true, "d": 2}}`, "", map[string]float64{"d": 2}, `metric "a" is not a number: left out; metric "b" is not a number: left out; metric "c" is not a number: left out`},
		{"huge number", `{"metrics": {"a": 1e999}}`, "", nil, `metric "a" is not a number: left out`},
		{"empty name", `{"metrics": {"": 1, "ok": 2}}`, "", map[string]float64{"ok": 2}, "a metric name is empty or over 100 bytes: left out"},
		{"long name", `{"metrics": {"` + strings.Repeat("n", 101) + `": 1}}`, "", nil, "a metric name is empty or over 100 bytes: left out"},
		{"big config", `{"config": {"x": "` + strings.Repeat("x", tools.MaxConfigBytes) + `"}, "metrics": {"a": 1}}`, "", map[string]float64{"a": 1}, "config is 8201 bytes, over 8192: left out"},
		{"invalid UTF-8 and controls", "{\"metrics\": {\"a\xff\": 1}}", "", map[string]float64{"a\ufffd": 1}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tools.ParseReport(tc.stdout)
			if string(r.Config) != tc.config || !reflect.DeepEqual(r.Metrics, tc.metrics) || r.Problem != tc.problem {
				t.Errorf("ParseReport = config %s metrics %v problem %q; want %s %v %q", r.Config, r.Metrics, r.Problem, tc.config, tc.metrics, tc.problem)
			}
		})
	}
	r := tools.ParseReport(string(manyJSON))
	if len(r.Metrics) != tools.MaxMetrics || !strings.Contains(r.Problem, "over 64 metrics: the rest left out") {
		t.Errorf("too many metrics: %d kept, problem %q", len(r.Metrics), r.Problem)
	}
	if r := tools.ParseReport(strings.Repeat("x", 70<<10)); !strings.Contains(r.Problem, "over 65536") {
		t.Errorf("a huge line: %q", r.Problem)
	}
}

// Whatever a program prints, ParseReport keeps only finite numbers under
// bounded names, at most MaxMetrics of them, and a config that is a compact
// JSON object within MaxConfigBytes.
func FuzzParseReport(f *testing.F) {
	for _, s := range []string{
		"", "\n", "{}", `{"config": {"k": 1}, "metrics": {"a": 0.5}}`, `{"metrics": {"a": null, "b": "x", "c": 1e999}}`,
		"line\n{\"config\": [1], \"metrics\": {\"\": 2}}\n", "{\"metrics\": {\"a\xff\": 1}}", `{"config": {"a": {"b": [1, {"c": null}]}}, "metrics": {"r2": -0}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, stdout string) {
		r := tools.ParseReport(stdout)
		if len(r.Metrics) > tools.MaxMetrics {
			t.Fatalf("%d metrics", len(r.Metrics))
		}
		for n, v := range r.Metrics {
			if n == "" || len(n) > tools.MaxMetricName || math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("metric %q = %v", n, v)
			}
		}
		if r.Config != nil {
			var obj map[string]any
			if len(r.Config) > tools.MaxConfigBytes || json.Unmarshal(r.Config, &obj) != nil || obj == nil {
				t.Fatalf("config %q", r.Config)
			}
		}
		if r.Metrics == nil && r.Problem == "" {
			t.Fatalf("no metrics and no problem for %q", stdout)
		}
	})
}
