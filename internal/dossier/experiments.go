package dossier

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/openrath/rath/pkg/events"
)

// FileExperimentsSVG is the plot of the primary metric over the experiments,
// written (and checked by Verify) when the dossier holds experiments.
const FileExperimentsSVG = "experiments.svg"

// Experiment is one experiment of a branch (rath.experiment.recorded): the
// command, the configuration and metrics its report gave, the workspace
// commit it ran on. OK says it exited 0 with a usable report.
type Experiment struct {
	At
	events.ExperimentRecorded
	OK bool `json:"ok"`
}

func experiment(e events.Stored, d *events.ExperimentRecorded) Experiment {
	x := Experiment{At: at(e), ExperimentRecorded: *d}
	x.OK = d.ExitCode == 0 && len(d.Metrics) > 0 && d.Problem == ""
	return x
}

// Objective is the metric the dossier ranks experiments by and whether
// higher is better.
type Objective struct {
	Metric string
	Higher bool
}

// higherBetter and lowerBetter are the name parts that say which way a
// metric goes, matched as a suffix after "_" or as the whole name.
var (
	higherBetter = []string{"r2", "accuracy", "acc", "f1", "auc", "precision", "recall", "score"}
	lowerBetter  = []string{"rmse", "mse", "mae", "loss", "error", "err", "perplexity"}
)

// direction says whether a metric is better higher (1), lower (-1) or
// unknown (0), by its name.
func direction(metric string) int {
	last := strings.ToLower(metric)
	if i := strings.LastIndexByte(last, '_'); i >= 0 {
		last = last[i+1:]
	}
	switch {
	case slices.Contains(higherBetter, last):
		return 1
	case slices.Contains(lowerBetter, last):
		return -1
	}
	return 0
}

// ObjectiveOf picks the metric to rank experiments by: among the metrics
// whose name says which way is better (r2, accuracy, f1… higher; rmse,
// loss, error… lower), the one the most successful experiments report,
// preferring a validation metric (val_ or valid_) to a training one, then
// the name. False when no metric qualifies.
func ObjectiveOf(xs []Experiment) (Objective, bool) {
	count := map[string]int{}
	for _, x := range xs {
		if !x.OK {
			continue
		}
		for m := range x.Metrics {
			if direction(m) != 0 {
				count[m]++
			}
		}
	}
	if len(count) == 0 {
		return Objective{}, false
	}
	rank := func(m string) int {
		if strings.HasPrefix(m, "val_") || strings.HasPrefix(m, "valid_") {
			return 0
		}
		if strings.HasPrefix(m, "train_") {
			return 2
		}
		return 1
	}
	names := make([]string, 0, len(count))
	for m := range count {
		names = append(names, m)
	}
	slices.SortFunc(names, func(a, b string) int {
		if count[a] != count[b] {
			return count[b] - count[a]
		}
		if rank(a) != rank(b) {
			return rank(a) - rank(b)
		}
		if direction(a) != direction(b) {
			return direction(b) - direction(a) // a higher-better one first
		}
		return strings.Compare(a, b)
	})
	return Objective{Metric: names[0], Higher: direction(names[0]) > 0}, true
}

// Best is the index in xs of the best successful experiment by o, the
// earliest of equals; -1 when none reports o's metric.
func Best(xs []Experiment, o Objective) int {
	best := -1
	for i, x := range xs {
		v, ok := x.Metrics[o.Metric]
		if !x.OK || !ok {
			continue
		}
		if best < 0 || o.Higher && v > xs[best].Metrics[o.Metric] || !o.Higher && v < xs[best].Metrics[o.Metric] {
			best = i
		}
	}
	return best
}

// experimentsSection writes the experiments table, the plot, the best
// configuration and the memory the failed ones left.
func experimentsSection(w func(string, ...any), d *Dossier, n namer) {
	if len(d.Experiments) == 0 {
		return
	}
	xs := d.Experiments
	w("\n## Experiments\n\n")
	obj, ranked := ObjectiveOf(xs)
	if ranked {
		way := "lower"
		if obj.Higher {
			way = "higher"
		}
		w("%s, ranked by %s (%s is better; the metric the most successful experiments report among those whose name says which way is better).\n\n",
			countOf(len(xs), "experiment", "experiments"), code(obj.Metric), way)
		w("![%s over the experiments](%s)\n\n", inline(obj.Metric, 100), FileExperimentsSVG)
	} else {
		w("%s; none reports a metric whose name says which way is better, so none is ranked.\n\n", countOf(len(xs), "experiment", "experiments"))
	}
	w("| # | branch | seq | experiment | agent | config | metrics | exit | commit | memory |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for i, x := range xs {
		status := strconv.Itoa(x.ExitCode)
		if x.Problem != "" {
			status += " (" + inline(x.Problem, 200) + ")"
		}
		w("| %d | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", i+1, n.of(x.Branch), x.Seq, cell(inline(x.Name, 100)), cell(inline(orDash(x.Agent), 60)),
			cell(inline(orDash(configText(x.Config)), 300)), cell(inline(orDash(events.MetricsText(x.Metrics)), 300)), status,
			cell(inline(orDash(shortCommit(x.Commit)), 20)), cell(inline(orDash(strings.Join(rememberedAs(d, x), ", ")), 300)))
	}
	w("\n")
	if ranked {
		if b := Best(xs, obj); b >= 0 {
			x := xs[b]
			w("**Best configuration**: %s on branch %s at %d, %s = %s, on workspace commit %s:\n\n", inline(x.Name, 100), n.of(x.Branch), x.Seq,
				code(obj.Metric), strconv.FormatFloat(x.Metrics[obj.Metric], 'g', 6, 64), code(orDash(x.Commit)))
			w("%s\n", block(indentJSON(x.Config), "json"))
		}
	}
	edges := memoryEdges(d)
	if len(edges) == 0 {
		return
	}
	w("Memory the experiments left: each item written with an experiment as its provenance, and where it was recalled.\n\n")
	w("| experiment | item | written | recalled |\n|---|---|---|---|\n")
	for _, e := range edges {
		w("| %s | %s | %s | %s |\n", cell(inline(e.experiment, 100)), cell(inline(e.item, 100)), e.written, cell(orDash(strings.Join(e.recalled, ", "))))
	}
	w("\n")
}

// memoryEdge is one memory item an experiment's event justified.
type memoryEdge struct {
	experiment, item, written string
	recalled                  []string
}

// memoryEdges follow each experiment to the memory items whose provenance
// names its event, and each item to the recalls that brought it back.
func memoryEdges(d *Dossier) []memoryEdge {
	n := newNamer(d)
	byEvent := map[string]Experiment{}
	for _, x := range d.Experiments {
		byEvent[x.EventID] = x
	}
	var out []memoryEdge
	for _, m := range d.Memory {
		if m.Kind != MemoryWritten || m.Provenance == nil {
			continue
		}
		for _, id := range m.Provenance.EventIDs {
			x, ok := byEvent[id]
			if !ok {
				continue
			}
			e := memoryEdge{experiment: x.Name, item: fmt.Sprintf("%s v%d", m.ItemID, m.Version), written: fmt.Sprintf("%s at %d", n.of(m.Branch), m.Seq)}
			for _, r := range d.Memory {
				if r.Kind != MemoryRecalled {
					continue
				}
				for _, it := range r.Items {
					if it.ItemID == m.ItemID && it.Version == m.Version {
						e.recalled = append(e.recalled, fmt.Sprintf("%s at %d", n.of(r.Branch), r.Seq))
					}
				}
			}
			out = append(out, e)
		}
	}
	return out
}

// rememberedAs lists the memory items written with x's event as provenance.
func rememberedAs(d *Dossier, x Experiment) []string {
	var out []string
	for _, m := range d.Memory {
		if m.Kind == MemoryWritten && m.Provenance != nil && slices.Contains(m.Provenance.EventIDs, x.EventID) {
			out = append(out, fmt.Sprintf("%s v%d", m.ItemID, m.Version))
		}
	}
	return out
}

// configText is a config object on one line, keys sorted.
func configText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	out, err := json.Marshal(v) // map keys sorted
	if err != nil {
		return string(raw)
	}
	return string(out)
}

func indentJSON(raw json.RawMessage) string {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return "{}"
	}
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return string(raw)
	}
	return string(out)
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

func countOf(k int, one, many string) string {
	if k == 1 {
		return "1 " + one
	}
	return strconv.Itoa(k) + " " + many
}

// ExperimentsSVG plots the objective's metric over the experiments, in
// the dossier's order (branch by branch, then by sequence): one point per
// experiment that reports it, a line through each branch's points, the best
// one ringed, failed experiments as crosses on the axis. Every text is
// escaped; "" when the dossier holds no ranked experiment.
func ExperimentsSVG(d *Dossier) string {
	xs := d.Experiments
	obj, ok := ObjectiveOf(xs)
	if !ok {
		return ""
	}
	n := newNamer(d)
	const (
		width, height          = 720.0, 340.0
		left, right, top, foot = 70.0, 160.0, 40.0, 60.0
	)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range xs {
		if v, ok := x.Metrics[obj.Metric]; ok && x.OK {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if lo == hi {
		lo, hi = lo-1, hi+1
	}
	pad := (hi - lo) * 0.1
	lo, hi = lo-pad, hi+pad
	px := func(i int) float64 {
		const inset = 30.0 // keeps the first and last points' labels off the axis and the legend
		if len(xs) == 1 {
			return left + (width-left-right)/2
		}
		return left + inset + float64(i)*(width-left-right-2*inset)/float64(len(xs)-1)
	}
	py := func(v float64) float64 { return top + (hi-v)/(hi-lo)*(height-top-foot) }
	colours := []string{"#1f6feb", "#d97706", "#059669", "#9333ea", "#dc2626", "#0891b2"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	way := "lower is better"
	if obj.Higher {
		way = "higher is better"
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="22" font-size="14" font-weight="bold">%s over the experiments (%s)</text>`+"\n", left, svgText(obj.Metric), way)
	// Axes and ticks.
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#444"/>`+"\n", left, top, left, height-foot)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#444"/>`+"\n", left, height-foot, width-right, height-foot)
	for k := 0; k <= 4; k++ {
		v := lo + (hi-lo)*float64(k)/4
		y := py(v)
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y, width-right, y)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", left-6, y, svgText(strconv.FormatFloat(v, 'g', 3, 64)))
	}
	for i := range xs {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%d</text>`+"\n", px(i), height-foot+16, i+1)
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">experiment (in the dossier's order)</text>`+"\n", left+(width-left-right)/2, height-foot+36)
	// One line per branch.
	var branches []string
	for _, x := range xs {
		if !slices.Contains(branches, x.Branch) {
			branches = append(branches, x.Branch)
		}
	}
	best := Best(xs, obj)
	for bi, br := range branches {
		colour := colours[bi%len(colours)]
		var pts []string
		for i, x := range xs {
			if v, ok := x.Metrics[obj.Metric]; ok && x.OK && x.Branch == br {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(i), py(v)))
			}
		}
		if len(pts) > 1 {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", colour, strings.Join(pts, " "))
		}
		for i, x := range xs {
			if x.Branch != br {
				continue
			}
			title := fmt.Sprintf("%s on %s at %d: %s", x.Name, n.of(x.Branch), x.Seq, events.MetricsText(x.Metrics))
			v, ok := x.Metrics[obj.Metric]
			if !x.OK || !ok {
				// A failed experiment: a cross on the axis.
				y := height - foot - 8
				fmt.Fprintf(&b, `<g stroke="#dc2626" stroke-width="2"><title>%s (failed: exit %d)</title><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/></g>`+"\n",
					svgText(title), x.ExitCode, px(i)-5, y-5, px(i)+5, y+5, px(i)-5, y+5, px(i)+5, y-5)
				continue
			}
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="5" fill="%s"><title>%s</title></circle>`+"\n", px(i), py(v), colour, svgText(title))
			if i == best {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="10" fill="none" stroke="#111" stroke-width="1.5"><title>best: %s</title></circle>`+"\n", px(i), py(v), svgText(x.Name))
			}
			lift := 10.0
			if i == best {
				lift = 14 // above the ring
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%s</text>`+"\n", px(i), py(v)-lift, svgText(clipRunes(x.Name, 24)))
		}
		// Legend.
		ly := top + 10 + float64(bi)*20
		fmt.Fprintf(&b, `<circle cx="%.0f" cy="%.0f" r="5" fill="%s"/><text x="%.0f" y="%.0f" dominant-baseline="middle">branch %s</text>`+"\n",
			width-right+20, ly, colour, width-right+30, ly, svgText(clipRunes(n.of(br), 20)))
	}
	ly := top + 10 + float64(len(branches))*20
	fmt.Fprintf(&b, `<g stroke="#dc2626" stroke-width="2"><line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f"/><line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f"/></g><text x="%.0f" y="%.0f" dominant-baseline="middle">failed</text>`+"\n",
		width-right+15, ly-5, width-right+25, ly+5, width-right+15, ly+5, width-right+25, ly-5, width-right+30, ly)
	b.WriteString("</svg>\n")
	return b.String()
}

// svgText is text for an SVG element or attribute: escaped, with invalid
// UTF-8 and control characters (which XML forbids) replaced.
func svgText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == 0xFFFE || r == 0xFFFF {
			return '\uFFFD'
		}
		return r
	}, s)
	return esc(s)
}

// clipRunes cuts s to n runes, with an ellipsis when cut.
func clipRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
