package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// Experiment is the tool that runs one experiment and records it.
const Experiment = "experiment"

const experimentDescription = "Run one experiment in the workspace: a command (as for run) whose last line of stdout is a JSON report {\"config\": {...}, \"metrics\": {\"name\": number, ...}}. The session records the experiment (its name, the configuration and metrics the report gives, the exit code and the workspace commit) as a rath.experiment.recorded event. Returns the command's result like run, after a line with the metrics recorded."

const experimentSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["name", "command"],
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 100, "description": "Name of the experiment, for example \"poly5-lr0.5\"."},
    "command": {"type": "array", "minItems": 1, "items": {"type": "string"}, "description": "Program and arguments, for example [\"go\", \"run\", \".\", \"-degree\", \"5\"]."},
    "timeout_seconds": {"type": ["integer", "null"], "minimum": 1, "maximum": 3600, "description": "Wall-clock limit in seconds. Default: the sandbox's, usually 120."}
  }
}`

// ExperimentArgs are the arguments of the experiment tool.
type ExperimentArgs struct {
	Name           string   `json:"name"`
	Command        []string `json:"command"`
	TimeoutSeconds *int     `json:"timeout_seconds"`
}

// Limits on an experiment's report: what a program may make the session
// record.
const (
	MaxMetrics     = 64
	MaxMetricName  = 100
	MaxConfigBytes = 8 << 10
	maxReportLine  = 64 << 10
)

// Report is what an experiment's output reported.
type Report struct {
	// Config is the report's config, a JSON object, or nil.
	Config json.RawMessage
	// Metrics are its numbers by name; nil when it reported none usable.
	Metrics map[string]float64
	// Problem says what was wrong with the report, if anything: no report
	// line, a line that is not a JSON object, metrics left out. A report
	// with a Problem still holds what could be used.
	Problem string
}

// ParseReport reads an experiment's report from its stdout: the last
// non-blank line, a JSON object with "config" (an object) and "metrics"
// (an object of numbers). It never fails: what it cannot use, it says in
// Problem.
func ParseReport(stdout string) Report {
	line := lastLine(stdout)
	if line == "" {
		return Report{Problem: "no report: stdout is empty"}
	}
	if len(line) > maxReportLine {
		return Report{Problem: fmt.Sprintf("no report: the last line of stdout is %d bytes, over %d", len(line), maxReportLine)}
	}
	var raw struct {
		Config  json.RawMessage            `json:"config"`
		Metrics map[string]json.RawMessage `json:"metrics"`
	}
	dec := json.NewDecoder(strings.NewReader(line))
	if err := dec.Decode(&raw); err != nil || dec.More() {
		return Report{Problem: "no report: the last line of stdout is not a JSON object with config and metrics"}
	}
	var r Report
	var problems []string
	if c := bytes.TrimSpace(raw.Config); len(c) > 0 && !bytes.Equal(c, []byte("null")) {
		var buf bytes.Buffer
		switch {
		case c[0] != '{':
			problems = append(problems, "config is not a JSON object: left out")
		case len(c) > MaxConfigBytes:
			problems = append(problems, fmt.Sprintf("config is %d bytes, over %d: left out", len(c), MaxConfigBytes))
		case json.Compact(&buf, c) != nil:
			problems = append(problems, "config is not valid JSON: left out")
		default:
			r.Config = buf.Bytes()
		}
	}
	names := make([]string, 0, len(raw.Metrics))
	for n := range raw.Metrics {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		var v float64
		switch {
		case n == "" || len(n) > MaxMetricName:
			problems = append(problems, fmt.Sprintf("a metric name is empty or over %d bytes: left out", MaxMetricName))
		case len(r.Metrics) == MaxMetrics:
			problems = append(problems, fmt.Sprintf("over %d metrics: the rest left out", MaxMetrics))
		case bytes.Equal(bytes.TrimSpace(raw.Metrics[n]), []byte("null")) || json.Unmarshal(raw.Metrics[n], &v) != nil || math.IsNaN(v) || math.IsInf(v, 0):
			problems = append(problems, fmt.Sprintf("metric %q is not a number: left out", n))
		default:
			if r.Metrics == nil {
				r.Metrics = map[string]float64{}
			}
			r.Metrics[n] = v
			continue
		}
		if len(r.Metrics) == MaxMetrics {
			break
		}
	}
	if len(r.Metrics) == 0 && len(problems) == 0 {
		problems = append(problems, "the report has no metrics")
	}
	r.Problem = strings.Join(slices.Compact(problems), "; ")
	return r
}

// lastLine is the last non-blank line of s, trimmed.
func lastLine(s string) string {
	last := ""
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(nil, len(s)+1)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			last = l
		}
	}
	return last
}

// experiment runs the command like run; the tool runner parses its report
// (ParseReport) and records the experiment.
func experiment(ctx context.Context, ws sandbox.Workspace, raw json.RawMessage) (Output, error) {
	args, err := decode[ExperimentArgs](Experiment, raw)
	if err != nil {
		return Output{}, err
	}
	out, err := runArgv(ctx, ws, Experiment, args.Command, args.TimeoutSeconds)
	if err != nil {
		return out, err
	}
	r := ParseReport(out.Stdout)
	head := fmt.Sprintf("experiment %s recorded", args.Name)
	if len(r.Metrics) > 0 {
		head += ": " + events.MetricsText(r.Metrics)
	}
	if r.Problem != "" {
		head += " (" + r.Problem + ")"
	}
	out.Result = head + "\n" + out.Result
	return out, nil
}
