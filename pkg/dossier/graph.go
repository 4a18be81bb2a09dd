package dossier

import (
	"fmt"
	"html"
	"strings"
)

// Colours of the verdicts in the graph.
var verdictColour = map[string]string{
	VerdictAccepted:   "#2e7d32",
	VerdictRejected:   "#c62828",
	VerdictSuperseded: "#8d6e63",
	VerdictClosed:     "#546e7a",
	VerdictOpen:       "#1565c0",
}

// Graph draws the session graph as a standalone SVG document: one lane per
// branch along its sequence numbers, fork links from the fork point, merge
// links (dashed) from the source head, and the key events: validations
// (green passed, red failed), tool calls that changed files (diamonds),
// memory recalls (small triangles) and closes (squares). Every mark has a
// tooltip. It uses no external asset.
func Graph(d *Dossier) string {
	const (
		left, top, lane, right = 230, 40, 56, 40
	)
	var maxSeq uint64 = 1
	row := map[string]int{}
	for i, b := range d.Branches {
		row[b.ID] = i
		maxSeq = max(maxSeq, b.Head.Seq)
	}
	step := min(28.0, max(4.0, 900.0/float64(maxSeq)))
	x := func(seq uint64) float64 { return left + float64(seq)*step }
	y := func(id string) float64 { return top + float64(row[id])*lane }
	width := int(x(maxSeq)) + right
	height := top + len(d.Branches)*lane + 30

	var s strings.Builder
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	s.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#6a1b9a"/></marker></defs>` + "\n")
	fmt.Fprintf(&s, `<title>%s</title>`+"\n", esc("Session graph of "+d.Root))
	// Sequence axis.
	tick := uint64(1)
	for float64(tick)*step < 40 {
		tick *= 2
	}
	axisY := float64(height - 18)
	fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#bbb"/>`+"\n", x(0), axisY, x(maxSeq), axisY)
	for q := uint64(0); q <= maxSeq; q += tick {
		fmt.Fprintf(&s, `<text x="%.1f" y="%.1f" fill="#888" text-anchor="middle" font-size="10">%d</text>`+"\n", x(q), axisY+13, q)
	}
	fmt.Fprintf(&s, `<text x="%d" y="%.1f" fill="#888" text-anchor="end" font-size="10">seq</text>`+"\n", left-10, axisY+13)

	for _, b := range d.Branches {
		c := verdictColour[b.Verdict]
		yy := y(b.ID)
		label := b.ID
		if len(label) > 26 {
			label = label[:25] + "…"
		}
		fmt.Fprintf(&s, `<text x="%d" y="%.1f" text-anchor="end" fill="%s" font-weight="bold"><title>%s</title>%s</text>`+"\n",
			left-10, yy-2, c, esc(b.ID+": "+b.Verdict+" "+b.VerdictReason), esc(label))
		fmt.Fprintf(&s, `<text x="%d" y="%.1f" text-anchor="end" fill="#666" font-size="10">%s</text>`+"\n",
			left-10, yy+11, esc(b.Verdict+", head "+fmt.Sprint(b.Head.Seq)))
		fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="4" stroke-linecap="round"><title>%s</title></line>`+"\n",
			x(b.FirstSeq), yy, x(b.Head.Seq), yy, c, esc(fmt.Sprintf("%s: own events %d..%d", b.ID, b.FirstSeq, b.Head.Seq)))
		if b.Parent != "" {
			px, py := x(b.ForkSeq), y(b.Parent)
			fmt.Fprintf(&s, `<path d="M%.1f,%.1f C%.1f,%.1f %.1f,%.1f %.1f,%.1f" fill="none" stroke="#999" stroke-width="2"><title>%s</title></path>`+"\n",
				px, py, px, yy, px, yy, x(b.FirstSeq), yy, esc(fmt.Sprintf("%s forked from %s at %d: %s", b.ID, b.Parent, b.ForkSeq, b.ForkReason)))
			fmt.Fprintf(&s, `<circle cx="%.1f" cy="%.1f" r="4" fill="#fff" stroke="#999" stroke-width="2"/>`+"\n", px, py)
		}
		for _, m := range b.Merges {
			if _, ok := row[m.SourceHead.Session]; !ok {
				continue
			}
			fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#6a1b9a" stroke-width="2" stroke-dasharray="5,3" marker-end="url(#arrow)"><title>%s</title></line>`+"\n",
				x(m.SourceHead.Seq), y(m.SourceHead.Session), x(m.Seq), yy, esc(fmt.Sprintf("merge of %s@%d into %s at %d: %s", m.Source, m.SourceHead.Seq, b.ID, m.Seq, m.Reason)))
		}
		if b.ClosedSeq != 0 {
			fmt.Fprintf(&s, `<rect x="%.1f" y="%.1f" width="10" height="10" fill="%s" stroke="#222"><title>%s</title></rect>`+"\n",
				x(b.ClosedSeq)-5, yy-5, c, esc(fmt.Sprintf("%s closed at %d: %s %s", b.ID, b.ClosedSeq, b.Outcome, b.CloseReason)))
		}
	}
	for _, t := range d.ToolCalls {
		if len(t.Files) == 0 {
			continue
		}
		cx, cy := x(t.Seqs[len(t.Seqs)-1]), y(t.Branch)
		fmt.Fprintf(&s, `<path d="M%.1f,%.1f l5,-5 l5,5 l-5,5 z" fill="#f9a825" stroke="#222"><title>%s</title></path>`+"\n",
			cx-5, cy, esc(fmt.Sprintf("%s at %d: %s %s changed %s (exit %d)", t.Branch, t.Seqs[len(t.Seqs)-1], t.Tool, t.CallID, strings.Join(t.Files, ", "), t.ExitCode)))
	}
	for _, m := range d.Memory {
		if m.Kind != MemoryRecalled {
			continue
		}
		cx, cy := x(m.Seq), y(m.Branch)
		fmt.Fprintf(&s, `<path d="M%.1f,%.1f l4,-8 l4,8 z" fill="#00838f"><title>%s</title></path>`+"\n",
			cx-4, cy-6, esc(fmt.Sprintf("%s at %d: %s recalled %d item(s) for %q", m.Branch, m.Seq, orDash(m.Agent), len(m.Items), m.Query)))
	}
	for _, v := range d.Validations {
		cx, cy := x(v.Seq), y(v.Branch)
		fill, what := "#2e7d32", "passed"
		if !v.Passed {
			fill, what = "#c62828", "failed: "+v.Reason
		}
		fmt.Fprintf(&s, `<circle cx="%.1f" cy="%.1f" r="6" fill="%s" stroke="#fff" stroke-width="1.5"><title>%s</title></circle>`+"\n",
			cx, cy, fill, esc(fmt.Sprintf("%s at %d: validation %s %s", v.Branch, v.Seq, v.Validator, what)))
		if !v.Passed {
			fmt.Fprintf(&s, `<path d="M%.1f,%.1f l6,6 m0,-6 l-6,6" stroke="#fff" stroke-width="1.5"/>`+"\n", cx-3, cy-3)
		}
	}
	s.WriteString("</svg>\n")
	return s.String()
}

func esc(s string) string { return html.EscapeString(s) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// GraphHTML is a self-contained page around the graph (svg, from Graph): a
// legend and a table of the branches. It renders offline.
func GraphHTML(d *Dossier, svg string) string {
	var s strings.Builder
	s.WriteString("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n")
	fmt.Fprintf(&s, "<title>%s</title>\n", esc("Rath dossier: "+d.Root))
	s.WriteString(`<style>
body{font-family:sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;margin-top:16px}
td,th{border:1px solid #ddd;padding:4px 8px;text-align:left;font-size:13px}
th{background:#f5f5f5}
.legend span{display:inline-block;margin-right:16px;font-size:13px}
.sw{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle}
.graph{overflow-x:auto;border:1px solid #eee;padding:8px}
code{font-size:12px}
</style>
</head>
<body>
`)
	fmt.Fprintf(&s, "<h1>Session graph of %s</h1>\n", esc(d.Root))
	if d.Task != "" {
		fmt.Fprintf(&s, "<p>Task: %s</p>\n", esc(d.Task))
	}
	if d.Final != nil {
		fmt.Fprintf(&s, "<p>Final answer: branch <b>%s</b>, closed %s at %d.</p>\n", esc(d.Final.Branch), esc(d.Final.Outcome), d.Final.Close.Seq)
	} else {
		s.WriteString("<p>No branch produced a final answer.</p>\n")
	}
	s.WriteString(`<p class="legend">`)
	for _, v := range []string{VerdictAccepted, VerdictRejected, VerdictSuperseded, VerdictClosed, VerdictOpen} {
		fmt.Fprintf(&s, `<span><i class="sw" style="background:%s"></i>%s</span>`, verdictColour[v], v)
	}
	s.WriteString(`<span>● validation (green passed, red failed)</span><span>◆ tool call that changed files</span><span>▲ memory recall</span><span>■ close</span><span>⇢ merge</span>`)
	s.WriteString("</p>\n<div class=\"graph\">\n")
	s.WriteString(svg)
	s.WriteString("</div>\n<table>\n<tr><th>branch</th><th>parent @ fork</th><th>status</th><th>verdict</th><th>head</th><th>tokens in/out</th></tr>\n")
	for _, b := range d.Branches {
		parent := "root"
		if b.Parent != "" {
			parent = fmt.Sprintf("%s @ %d", b.Parent, b.ForkSeq)
		}
		status := b.Status
		if b.Outcome != "" {
			status += " (" + b.Outcome + ")"
		}
		fmt.Fprintf(&s, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%d <code>%s</code></td><td>%d / %d</td></tr>\n",
			esc(b.ID), esc(parent), esc(status), esc(verdictText(b)), b.Head.Seq, esc(short(b.Head.Hash)),
			b.Usage.Total.In, b.Usage.Total.Out)
	}
	s.WriteString("</table>\n</body>\n</html>\n")
	return s.String()
}
