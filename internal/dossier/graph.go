package dossier

import (
	"fmt"
	"html"
	"strings"
)

// Kinds of lane in the graph, each with its colour: the status a person
// reads off a branch (laneKind).
const (
	laneAccepted   = "accepted"
	laneSuperseded = "superseded"
	laneRejected   = "rejected"
	laneClosed     = "closed"
	laneOpen       = "open"
)

var laneColour = map[string]string{
	laneAccepted:   "#2e7d32",
	laneSuperseded: "#8d6e63",
	laneRejected:   "#c62828",
	laneClosed:     "#546e7a",
	laneOpen:       "#1565c0",
}

// laneLegend explains each kind of lane, in the order the legend lists them.
var laneLegend = []struct{ kind, text string }{
	{laneAccepted, "accepted (the final answer)"},
	{laneSuperseded, "superseded (closed to continue on a fork)"},
	{laneRejected, "rejected (closed after a failed validation)"},
	{laneClosed, "closed otherwise"},
	{laneOpen, "open"},
}

// laneKind is the colour a branch's lane takes: its status, as the tables
// print it. A branch closed as superseded is superseded even when its last
// validation failed (the failure shows as its own mark on the lane).
func laneKind(b Branch) string {
	switch {
	case b.Verdict == VerdictAccepted:
		return laneAccepted
	case b.ClosedSeq == 0 && b.Status != "closed":
		return laneOpen
	case strings.EqualFold(b.Outcome, "superseded"):
		return laneSuperseded
	case b.Verdict == VerdictRejected:
		return laneRejected
	}
	return laneClosed
}

// memoryColour is the colour of memory writes, recalls and the edges from a
// write to the recalls of what it wrote.
const memoryColour = "#00838f"

// Graph draws the session graph as a standalone SVG document: one lane per
// branch along its sequence numbers, named by BranchNames and coloured by
// its status (laneKind), fork links from the fork point, merge links
// (dashed) from the source head, memory links from a write to each branch's
// first recall of it (across branches: a fork recalling what an abandoned
// branch learnt), and the key events: validations (green passed, red
// failed), tool calls that changed files (diamonds), memory writes (▼) and
// recalls (▲, hollow when nothing was recalled) and closes (squares). Every
// mark has a tooltip; a branch's full session ID is its label's. It uses no
// external asset.
func Graph(d *Dossier) string {
	const (
		left, top, lane, right = 190, 46, 72, 40
	)
	n := newNamer(d)
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
	height := top + len(d.Branches)*lane + 10

	var s strings.Builder
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	s.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#6a1b9a"/></marker>`)
	fmt.Fprintf(&s, `<marker id="recall" viewBox="0 0 10 10" refX="9" refY="5" markerUnits="userSpaceOnUse" markerWidth="9" markerHeight="9" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="%s"/></marker></defs>`+"\n", memoryColour)
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
		c := laneColour[laneKind(b)]
		yy := y(b.ID)
		fmt.Fprintf(&s, `<text x="%d" y="%.1f" text-anchor="end" fill="%s" font-weight="bold"><title>%s</title>%s</text>`+"\n",
			left-10, yy-2, c, esc(tip(b.ID+": "+statusText(b)+"; verdict "+b.Verdict, b.VerdictReason)), esc(n.of(b.ID)))
		fmt.Fprintf(&s, `<text x="%d" y="%.1f" text-anchor="end" fill="#666" font-size="10"><title>%s</title>%s</text>`+"\n",
			left-10, yy+11, esc(b.ID), esc(statusText(b)+", head "+fmt.Sprint(b.Head.Seq)))
		fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="4" stroke-linecap="round"><title>%s</title></line>`+"\n",
			x(b.FirstSeq), yy, x(b.Head.Seq), yy, c, esc(fmt.Sprintf("%s (%s): own events %d..%d, %s", n.of(b.ID), b.ID, b.FirstSeq, b.Head.Seq, statusText(b))))
		if b.Parent != "" {
			px, py := x(b.ForkSeq), y(b.Parent)
			fmt.Fprintf(&s, `<path d="M%.1f,%.1f C%.1f,%.1f %.1f,%.1f %.1f,%.1f" fill="none" stroke="#999" stroke-width="2"><title>%s</title></path>`+"\n",
				px, py, px, yy, px, yy, x(b.FirstSeq), yy, esc(tip(fmt.Sprintf("%s forked from %s at %d", n.of(b.ID), n.of(b.Parent), b.ForkSeq), n.text(b.ForkReason))))
			fmt.Fprintf(&s, `<circle cx="%.1f" cy="%.1f" r="4" fill="#fff" stroke="#999" stroke-width="2"/>`+"\n", px, py)
		}
		for _, m := range b.Merges {
			if _, ok := row[m.SourceHead.Session]; !ok {
				continue
			}
			fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#6a1b9a" stroke-width="2" stroke-dasharray="5,3" marker-end="url(#arrow)"><title>%s</title></line>`+"\n",
				x(m.SourceHead.Seq), y(m.SourceHead.Session), x(m.Seq), yy, esc(tip(fmt.Sprintf("merge of %s@%d into %s at %d", n.of(m.Source), m.SourceHead.Seq, n.of(b.ID), m.Seq), n.text(m.Reason))))
		}
		if b.ClosedSeq != 0 {
			fmt.Fprintf(&s, `<rect x="%.1f" y="%.1f" width="10" height="10" fill="%s" stroke="#222"><title>%s</title></rect>`+"\n",
				x(b.ClosedSeq)-5, yy-5, c, esc(tip(fmt.Sprintf("%s closed at %d: %s", n.of(b.ID), b.ClosedSeq, b.Outcome), n.text(b.CloseReason))))
		}
	}
	// Memory: each write linked to the first recall of it on each branch.
	type link struct {
		write  *Memory
		branch string
	}
	recalls := map[link][]uint64{}
	var links []link
	for i, m := range d.Memory {
		if m.Kind != MemoryRecalled {
			continue
		}
		for _, it := range m.Items {
			wr := writeOf(d, it.ItemID, it.Version)
			if wr == nil {
				continue
			}
			l := link{wr, m.Branch}
			if recalls[l] == nil {
				links = append(links, l)
			}
			recalls[l] = append(recalls[l], d.Memory[i].Seq)
		}
	}
	for _, l := range links {
		seqs := recalls[l]
		// From the write's mark to just above the recall's: down from the
		// write's lane to a branch below it, over the lanes otherwise.
		x1, y1 := x(l.write.Seq), y(l.write.Branch)-14
		x2, y2 := x(seqs[0]), y(l.branch)-17
		bend := min(y1, y2) - 24
		if row[l.branch] > row[l.write.Branch] {
			y1 = y(l.write.Branch) + 3
			bend = (y1 + y2) / 2
		}
		at := make([]string, len(seqs))
		for i, q := range seqs {
			at[i] = fmt.Sprint(q)
		}
		fmt.Fprintf(&s, `<path d="M%.1f,%.1f C%.1f,%.1f %.1f,%.1f %.1f,%.1f" fill="none" stroke="%s" stroke-width="2" marker-end="url(#recall)"><title>%s</title></path>`+"\n",
			x1, y1, x1, bend, x2, bend, x2, y2, memoryColour, esc(tip(fmt.Sprintf("memory %s v%d, written on %s at %d, recalled on %s at %s", l.write.ItemID, l.write.Version,
				n.of(l.write.Branch), l.write.Seq, n.of(l.branch), strings.Join(at, ", ")), l.write.Content)))
	}
	for _, t := range d.ToolCalls {
		if len(t.Files) == 0 {
			continue
		}
		cx, cy := x(t.Seqs[len(t.Seqs)-1]), y(t.Branch)
		fmt.Fprintf(&s, `<path d="M%.1f,%.1f l5,-5 l5,5 l-5,5 z" fill="#f9a825" stroke="#222"><title>%s</title></path>`+"\n",
			cx-5, cy, esc(fmt.Sprintf("%s at %d: %s %s changed %s (exit %d)", n.of(t.Branch), t.Seqs[len(t.Seqs)-1], t.Tool, t.CallID, strings.Join(t.Files, ", "), t.ExitCode)))
	}
	for _, m := range d.Memory {
		cx, cy := x(m.Seq), y(m.Branch)
		switch m.Kind {
		case MemoryRecalled:
			fill, what := memoryColour, make([]string, len(m.Items))
			if len(m.Items) == 0 {
				fill = "#fff"
			}
			for i, it := range m.Items {
				what[i] = fmt.Sprintf("%s v%d “%s”", it.ItemID, it.Version, oneLine(it.Content, 80))
			}
			fmt.Fprintf(&s, `<path d="M%.1f,%.1f l4,-8 l4,8 z" fill="%s" stroke="%s"><title>%s</title></path>`+"\n",
				cx-4, cy-6, fill, memoryColour, esc(tip(fmt.Sprintf("%s at %d: %s recalled %s for %s", n.of(m.Branch), m.Seq, orDash(m.Agent), plural(len(m.Items), "item"), queryTip(d, m.Query)), strings.Join(what, "; "))))
		case MemoryWritten:
			fmt.Fprintf(&s, `<path d="M%.1f,%.1f l8,0 l-4,8 z" fill="%s" stroke="%s"><title>%s</title></path>`+"\n",
				cx-4, cy-14, memoryColour, memoryColour, esc(tip(fmt.Sprintf("%s at %d: memory written, %s v%d (%s)", n.of(m.Branch), m.Seq, m.ItemID, m.Version, m.Scope), m.Content)))
		}
	}
	for _, v := range d.Validations {
		cx, cy := x(v.Seq), y(v.Branch)
		fill, what := "#2e7d32", "passed"
		if !v.Passed {
			fill, what = "#c62828", "failed"
		}
		fmt.Fprintf(&s, `<circle cx="%.1f" cy="%.1f" r="6" fill="%s" stroke="#fff" stroke-width="1.5"><title>%s</title></circle>`+"\n",
			cx, cy, fill, esc(tip(fmt.Sprintf("%s at %d: validation %s %s", n.of(v.Branch), v.Seq, v.Validator, what), v.Reason)))
		if !v.Passed {
			fmt.Fprintf(&s, `<path d="M%.1f,%.1f l6,6 m0,-6 l-6,6" stroke="#fff" stroke-width="1.5"/>`+"\n", cx-3, cy-3)
		}
	}
	s.WriteString("</svg>\n")
	return s.String()
}

// queryTip is a recall's query for a tooltip, or "the task" (queryText).
func queryTip(d *Dossier, query string) string {
	if q := strings.TrimSpace(query); q != "" && q == strings.TrimSpace(d.Task) {
		return "the task"
	}
	return "“" + oneLine(query, 80) + "”"
}

// tip is a tooltip: a head line and, when there is one, a detail on one
// line, cut short (a tooltip shows no more).
func tip(head, detail string) string {
	if detail = oneLine(detail, 300); detail != "" {
		return head + ": " + detail
	}
	return head
}

func esc(s string) string { return html.EscapeString(s) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// GraphHTML is a self-contained page around the graph (svg, from Graph): a
// legend and a table of the branches, by name with their full session IDs.
// It renders offline.
func GraphHTML(d *Dossier, svg string) string {
	n := newNamer(d)
	var s strings.Builder
	s.WriteString("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n")
	fmt.Fprintf(&s, "<title>%s</title>\n", esc("Rath dossier: "+d.Root))
	s.WriteString(`<style>
body{font-family:sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;margin-top:16px}
td,th{border:1px solid #ddd;padding:4px 8px;text-align:left;font-size:13px;vertical-align:top}
th{background:#f5f5f5}
.legend span{display:inline-block;margin-right:16px;font-size:13px}
.sw{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle}
.graph{overflow-x:auto;border:1px solid #eee;padding:8px}
code{font-size:12px}
pre{background:#f7f7f7;padding:8px;font-size:12px;white-space:pre-wrap}
summary{cursor:pointer}
</style>
</head>
<body>
`)
	fmt.Fprintf(&s, "<h1>Session graph of %s</h1>\n", esc(d.Root))
	if d.Task != "" {
		first, _, _ := strings.Cut(strings.TrimSpace(d.Task), "\n")
		fmt.Fprintf(&s, "<details><summary>Task: %s</summary>\n<pre>%s</pre>\n</details>\n", esc(oneLine(strings.TrimLeft(first, "# "), 200)), esc(clip(d.Task, 4000)))
	}
	if f := d.Final; f != nil {
		fmt.Fprintf(&s, "<p>Final answer: branch <b title=\"%s\">%s</b>, closed %s at %d.</p>\n", esc(f.Branch), esc(n.of(f.Branch)), esc(f.Outcome), f.Close.Seq)
	} else {
		s.WriteString("<p>No branch produced a final answer.</p>\n")
	}
	s.WriteString(`<p class="legend">`)
	for _, l := range laneLegend {
		fmt.Fprintf(&s, `<span><i class="sw" style="background:%s"></i>%s</span>`, laneColour[l.kind], esc(l.text))
	}
	s.WriteString("</p>\n<p class=\"legend\">")
	fmt.Fprintf(&s, `<span>● validation (green passed, red ✕ failed)</span><span>◆ tool call that changed files</span><span style="color:%[1]s">▼ memory write</span><span style="color:%[1]s">▲ memory recall (△ nothing recalled)</span><span style="color:%[1]s">→ from a write to its recall</span><span>■ close</span><span style="color:#6a1b9a">⇢ merge</span>`, memoryColour)
	s.WriteString("</p>\n<div class=\"graph\">\n")
	s.WriteString(svg)
	s.WriteString("</div>\n<table>\n<tr><th>branch</th><th>session ID</th><th>parent @ fork</th><th>status</th><th>verdict</th><th>head</th><th>tokens in/out</th></tr>\n")
	for _, b := range d.Branches {
		parent := "-"
		if b.Parent != "" {
			parent = fmt.Sprintf("%s @ %d", n.of(b.Parent), b.ForkSeq)
		}
		verdict := b.Verdict
		if b.VerdictReason != "" {
			verdict += ": " + oneLine(n.text(b.VerdictReason), 160)
		}
		fmt.Fprintf(&s, "<tr><td style=\"color:%s;white-space:nowrap\"><b>%s</b></td><td><code>%s</code></td><td>%s</td><td>%s</td><td>%s</td><td>%d <code>%s</code></td><td>%d / %d</td></tr>\n",
			laneColour[laneKind(b)], esc(n.of(b.ID)), esc(b.ID), esc(parent), esc(statusText(b)), esc(verdict), b.Head.Seq, esc(short(b.Head.Hash)),
			b.Usage.Total.In, b.Usage.Total.Out)
	}
	s.WriteString("</table>\n</body>\n</html>\n")
	return s.String()
}
