package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// row is one line of the result table: a Rath figure, the raw JetStream
// figure it is compared with (measured in the same run on the same
// payloads), their ratio and the target, if any.
type row struct {
	id      string
	what    string
	rath    string
	rawWhat string
	raw     string
	ratio   string
	target  string
}

// report collects the rows and the notes printed under the table.
type report struct {
	rows  []row
	notes []string
}

func (r *report) add(x ...row) { r.rows = append(r.rows, x...) }

func (r *report) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

func (r *report) write(w io.Writer) {
	fmt.Fprintln(w, "| # | Rath | Rath figure | raw JetStream reference | raw figure | Rath ÷ raw | target |")
	fmt.Fprintln(w, "|---|---|---:|---|---:|---:|---|")
	for _, x := range r.rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n",
			x.id, cell(x.what), cell(x.rath), cell(x.rawWhat), cell(x.raw), cell(x.ratio), cell(x.target))
	}
	if len(r.notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range r.notes {
			fmt.Fprintln(w, "- "+n)
		}
	}
}

func cell(s string) string {
	if s == "" {
		return "—"
	}
	return strings.ReplaceAll(s, "|", `\|`)
}

// rate is n operations in d.
type rate struct {
	n int
	d time.Duration
}

func (r rate) perSec() float64 {
	if r.d <= 0 {
		return 0
	}
	return float64(r.n) / r.d.Seconds()
}

func (r rate) String() string { return fmtRate(r.perSec()) + " ev/s" }

func fmtRate(v float64) string {
	switch {
	case v >= 10_000:
		return fmt.Sprintf("%.1fk", v/1000)
	case v >= 1_000:
		return fmt.Sprintf("%.2fk", v/1000)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	}
}

func fmtBytes(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	default:
		return fmt.Sprintf("%d B", b)
	}
}

// speedRatio is Rath's throughput over raw throughput.
func speedRatio(rath, raw rate) float64 {
	if raw.perSec() == 0 {
		return 0
	}
	return rath.perSec() / raw.perSec()
}

// latencyRatio is raw latency over Rath latency: like speedRatio, 1.0 means
// as fast as raw JetStream and below 1 means slower.
func latencyRatio(rath, raw time.Duration) float64 {
	if rath <= 0 {
		return 0
	}
	return float64(raw) / float64(rath)
}

func fmtRatio(x float64) string {
	if x == 0 {
		return ""
	}
	if x < 0.01 {
		return fmt.Sprintf("%.4f×", x)
	}
	return fmt.Sprintf("%.2f×", x)
}

// atLeast renders a "ratio ≥ min" target and whether it was met.
func atLeast(x, minimum float64, aim string) string {
	t := fmt.Sprintf("≥ %g×", minimum)
	if aim != "" {
		t += " (aim " + aim + ")"
	}
	return t + ": " + verdict(x >= minimum)
}

func verdict(met bool) string {
	if met {
		return "**met**"
	}
	return "**missed**"
}

// latencies is a set of measured durations.
type latencies []time.Duration

func (l latencies) pct(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	i := int(p/100*float64(len(s)-1) + 0.5)
	return s[i]
}

func (l latencies) median() time.Duration { return l.pct(50) }

func (l latencies) String() string {
	return fmt.Sprintf("p50 %s, p99 %s", fmtDur(l.pct(50)), fmtDur(l.pct(99)))
}
