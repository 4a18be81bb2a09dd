package eval

import (
	"fmt"
	"html/template"
	"io"
	"net/url"
	"strings"
	"time"
)

// WriteHTML writes the report as one self-contained HTML page (no script,
// no external asset): the metrics table, a chart of each task's pass@1
// and pass^k (hand-written SVG), the failures, the gate when there is one,
// and every run with its signed head, linked to its dossier: the page of
// its session in the console when the report has a ConsoleURL, and the
// rath export command line that writes it in any case. Every value from the
// task file, the sessions or the ledger is escaped by html/template.
func (r *Report) WriteHTML(w io.Writer) error {
	return reportPage.Execute(w, r)
}

// ConsoleSession is the console page of a session (internal/console: /s/ID),
// under the report's console URL; "" without one.
func (r *Report) ConsoleSession(id string) string {
	if r.ConsoleURL == "" || id == "" {
		return ""
	}
	return strings.TrimSuffix(r.ConsoleURL, "/") + "/s/" + url.PathEscape(id)
}

// CheckConsoleURL checks a console URL a report links sessions under: an
// absolute http or https URL without a query or fragment.
func CheckConsoleURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("console URL %q: %w", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("console URL %q: want http:// or https:// and a host, without user, query or fragment (such as http://127.0.0.1:8470)", s)
	}
	return nil
}

// chartBar is one task's row of the chart, in SVG user units.
type chartBar struct {
	ID            string
	Y, TextY      int
	Width, HatW   float64
	PassAt1, HatK float64
}

const (
	chartLabelW = 180 // room for the task IDs
	chartBarW   = 400 // pass@1 1.0
	chartRowH   = 26
)

func (r *Report) chart() (bars []chartBar, height int) {
	for i, t := range r.Tasks {
		y := 30 + i*chartRowH
		bars = append(bars, chartBar{ID: cut(t.ID, 28), Y: y, TextY: y + 14,
			Width: t.Summary.PassAt1 * chartBarW, HatW: t.Summary.PassHatK * chartBarW, PassAt1: t.Summary.PassAt1, HatK: t.Summary.PassHatK})
	}
	return bars, 30 + len(r.Tasks)*chartRowH + 24
}

// num is a number of the template as a float64 (0 for anything else).
func num(v any) float64 {
	switch v := v.(type) {
	case int:
		return float64(v)
	case float64:
		return v
	}
	return 0
}

// derefAny is the value of a report's optional number.
func derefAny(v any) any {
	switch v := v.(type) {
	case *float64:
		if v != nil {
			return *v
		}
	case *int:
		if v != nil {
			return *v
		}
	}
	return 0
}

func cut(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

var reportPage = template.Must(template.New("report").Funcs(template.FuncMap{
	"money":   Money,
	"latency": latency,
	"runLat":  runLatency,
	"result":  result,
	"head":    head,
	"byCause": byCause,
	"or":      or,
	"pct":     func(f float64) string { return fmt.Sprintf("%.2f", f) },
	"dur":     func(ms int64) string { return (time.Duration(ms) * time.Millisecond).String() },
	"took":    func(r *Report) string { return r.Finished.Sub(r.Started).Round(time.Millisecond).String() },
	"rfc":     func(t time.Time) string { return t.Format(time.RFC3339) },
	"join":    strings.Join,
	"argv":    argv,
	"chart": func(r *Report) map[string]any {
		bars, h := r.chart()
		return map[string]any{"Bars": bars, "Height": h, "LabelW": chartLabelW, "BarW": chartBarW, "Width": chartLabelW + chartBarW + 70,
			"AxisX": chartLabelW + chartBarW, "K": r.K}
	},
	"add":   func(a, b any) float64 { return num(a) + num(b) },
	"deref": derefAny,
	"flipText": func(c TaskChange) string {
		if c.Flip == FlipBetter {
			return "failed then, passes now"
		}
		return "passed then, fails now"
	},
}).Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Eval {{.ID}}</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #1d232a; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.15em; margin-top: 1.8em; }
table { border-collapse: collapse; margin: .5em 0; } th, td { padding: .25em .6em; border-bottom: 1px solid #dde2e7; text-align: left; vertical-align: top; }
th { background: #f3f5f7; } td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.overall td { font-weight: 600; border-top: 2px solid #9aa5b1; }
code { font: 12px ui-monospace, monospace; background: #f3f5f7; padding: 0 .25em; word-break: break-all; }
.pass { color: #17752f; } .fail { color: #b3261e; } .muted { color: #5f6b76; }
.regressed { color: #b3261e; font-weight: 600; }
svg text { font: 12px system-ui, sans-serif; fill: #1d232a; }
</style>
</head>
<body>
<h1>Eval {{.ID}}</h1>
<p class="muted"><code>{{.File}}</code>: {{len .Tasks}} tasks × {{.K}} runs, concurrency {{.Concurrency}}, run timeout {{dur .TimeoutMS}}; started {{rfc .Started}}, took {{took .}}.</p>

<h2>Per task</h2>
<table>
<tr><th>task</th><th class="n">runs</th><th class="n">pass@1</th><th class="n">pass^{{.K}}</th><th class="n">pass@{{.K}}</th><th class="n">tokens in</th><th class="n">tokens out</th><th class="n">cost ({{.Currency}})</th><th class="n">latency p50</th><th class="n">latency p95</th></tr>
{{range .Tasks}}<tr><td>{{.ID}}</td>{{template "sum" .Summary}}</tr>
{{end}}<tr class="overall"><td>overall</td>{{template "sum" .Overall}}</tr>
</table>
{{if .Overall.NoPrice}}<p>No price for {{join .Overall.NoPrice ", "}} in {{or .Prices "the default price table"}}.</p>{{end}}

{{with chart .}}<svg role="img" aria-label="pass@1 and pass^{{.K}} per task" width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" xmlns="http://www.w3.org/2000/svg">
<text x="0" y="14">pass@1 per task (bar) and pass^{{.K}} (line)</text>
<line x1="{{.LabelW}}" y1="22" x2="{{.LabelW}}" y2="{{.Height}}" stroke="#9aa5b1"/>
<line x1="{{.AxisX}}" y1="22" x2="{{.AxisX}}" y2="{{.Height}}" stroke="#dde2e7" stroke-dasharray="3 3"/>
{{$lw := .LabelW}}{{range .Bars}}<text x="{{add $lw -8}}" y="{{.TextY}}" text-anchor="end">{{.ID}}</text>
<rect x="{{$lw}}" y="{{.Y}}" width="{{.Width}}" height="18" fill="#3b7dd8"><title>{{.ID}}: pass@1 {{pct .PassAt1}}</title></rect>
<line x1="{{$lw}}" y1="{{.TextY}}" x2="{{add $lw .HatW}}" y2="{{.TextY}}" stroke="#17752f" stroke-width="3"/>
<text x="{{add (add $lw .Width) 6}}" y="{{.TextY}}">{{pct .PassAt1}}</text>
{{end}}<text x="{{$lw}}" y="{{add .Height -4}}" class="muted">0</text><text x="{{.AxisX}}" y="{{add .Height -4}}" text-anchor="end">1</text>
</svg>{{end}}

{{if .Overall.Failures}}<h2>Failures</h2>
<p>By cause: {{byCause .Overall.ByCause}}.</p>
<table><tr><th>task</th><th class="n">runs</th><th>cause</th><th>detail</th></tr>
{{range $t := .Tasks}}{{range .Summary.Failures}}<tr><td>{{$t.ID}}</td><td class="n">{{.Count}}</td><td>{{.Cause}}</td><td>{{.Detail}}</td></tr>
{{end}}{{end}}</table>{{end}}

{{with .Gate}}<h2>Against baseline {{.Baseline}}</h2>
<p>{{if .Regressed}}<span class="regressed">Regressed: {{join .Regressed ", "}}</span>{{else}}<span class="pass">No task regressed</span>{{end}} (max pass drop {{pct .MaxPassDrop}}).</p>
<table><tr><th>task</th><th>pass@1</th><th>pass^k</th><th>cost/run</th><th>flipped</th><th>regressions</th></tr>
{{range .Tasks}}<tr><td>{{.ID}}</td>{{if .Only}}<td colspan="5" class="muted">only in the {{.Only}}: not compared</td>{{else}}<td>{{pct .BaselinePassAt1}} → {{pct .PassAt1}}</td><td>{{if .PassHatK}}{{pct (deref .BaselinePassHatK)}} → {{pct (deref .PassHatK)}}{{else}}-{{end}}</td><td>{{money .BaselineCost}} → {{money .Cost}}</td>
<td>{{if .Flip}}{{flipText .}}<br><code>rath diff {{or .BaselineSession "-"}} {{or .Session "-"}}</code>{{end}}</td><td class="regressed">{{join .Regressions "; "}}</td>{{end}}</tr>
{{end}}</table>{{end}}

<h2>Runs</h2>
<p>Each run's session, with its head as the ledger signed it when the run ended. Its dossier: <code>rath export SESSION --out DIR</code> (verifiable offline); <code>rath verify SESSION</code> checks the head.</p>
<table><tr><th>task</th><th class="n">try</th><th>session</th><th>result</th><th>outcome</th><th class="n">tokens in/out</th><th class="n">cost</th><th class="n">latency</th><th>head</th><th>head hash</th><th>signature</th><th>dossier</th></tr>
{{$r := .}}{{range $t := .Tasks}}{{range .Runs}}<tr><td>{{$t.ID}}</td><td class="n">{{.Try}}</td>
<td>{{with $r.ConsoleSession .Session}}<a href="{{.}}">{{end}}<code>{{or .Session "-"}}</code>{{if $r.ConsoleSession .Session}}</a>{{end}}</td>
<td class="{{if .Passed}}pass{{else}}fail{{end}}">{{result .}}{{with .Grading}}{{if .ExitCode}}<br><span class="muted">exit {{deref .ExitCode}}: <code>{{argv .Command}}</code></span>{{end}}{{end}}</td>
<td>{{or .Outcome "-"}}</td><td class="n">{{.TokensIn}}/{{.TokensOut}}</td><td class="n">{{money .Cost}}</td><td class="n">{{runLat .}}</td><td>{{head .}}</td><td><code>{{or .HeadHash "-"}}</code></td><td><code>{{or .HeadSig "-"}}</code></td>
<td>{{if .Session}}<code>rath export {{.Session}} --out dossiers/{{.Session}}</code>{{with $r.ConsoleSession .Session}} · <a href="{{.}}/dossier.md">dossier.md</a>{{end}}{{end}}</td></tr>
{{end}}{{end}}</table>
</body>
</html>
{{define "sum"}}<td class="n">{{.Runs}}</td><td class="n">{{pct .PassAt1}}</td><td class="n">{{pct .PassHatK}}</td><td class="n">{{pct .PassAtK}}</td><td class="n">{{.TokensIn}}</td><td class="n">{{.TokensOut}}</td><td class="n">{{money .Cost}}</td><td class="n">{{latency . .LatencyP50}}</td><td class="n">{{latency . .LatencyP95}}</td>{{end}}
`))
