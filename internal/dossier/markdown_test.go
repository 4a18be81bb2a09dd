package dossier_test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/dossier"
	dt "github.com/openrath/rath/internal/dossier/dossiertest"
)

// dossier.md of a tree stored through the ledger renders in a
// GitHub-flavoured renderer as written: every table keeps its columns and
// its cells hold what they should, whatever the events' texts hold (go
// test's output on several lines, pipes, backticks, asterisks, angle
// brackets); whole texts (the validator's output, the memory items) stand
// in code blocks below the tables, and the recalled memory's text is there.
func TestMarkdownRendersAsGFM(t *testing.T) {
	d, dir, _ := exported(t)
	md := mustRead(t, filepath.Join(dir, dossier.FileMarkdown))
	tables := dt.Tables(t, md)

	byHeader := map[string]dt.Table{}
	for _, tb := range tables {
		byHeader[strings.Join(tb.Header, " | ")] = tb
	}
	want := func(header string, rows ...[]string) {
		t.Helper()
		tb, ok := byHeader[header]
		if !ok {
			t.Errorf("no table with the header %q; tables:\n%s", header, dumpTables(tables))
			return
		}
		if len(tb.Rows) != len(rows) {
			t.Errorf("table %q has %d rows, want %d:\n%s", header, len(tb.Rows), len(rows), dumpTables([]dt.Table{tb}))
			return
		}
		for i, row := range rows {
			if len(tb.Rows[i]) != len(tb.Header) {
				t.Errorf("table %q row %d: %d cells, header %d", header, i+1, len(tb.Rows[i]), len(tb.Header))
				continue
			}
			for j, cell := range row {
				re := regexp.MustCompile(cell)
				if !re.MatchString(tb.Rows[i][j]) {
					t.Errorf("table %q row %d, column %q: %q does not match %q", header, i+1, tb.Header[j], tb.Rows[i][j], cell)
				}
			}
		}
	}
	hash := func(id string) string {
		for _, b := range d.Branches {
			if b.ID == id {
				return b.Head.Hash
			}
		}
		t.Fatalf("no branch %s", id)
		return ""
	}
	q := regexp.QuoteMeta
	want("branch | session ID | parent @ fork | status | verdict | own events | head | tokens in/out",
		[]string{"^root$", "^fix$", "^-$", q("closed (superseded)"),
			"^" + q("rejected: validation tests failed at seq 16: TestAdd still fails: got 6, want 5 --- FAIL: TestAdd (0.00s) calc_test.go:9: Add(2, 3) = 6 | want 5: `a * b` is *not* a sum <"),
			"^1..19$", "^19 " + hash(dt.Root)[:12] + "$", "^(100 / 10|300 / 30)$"},
		[]string{"^fork-1@7$", "^fix-b$", "^root @ 7$", q("closed (succeeded)"), "^" + q("accepted: closed succeeded after tests passed (seq 23)") + "$",
			"^8..25$", "^25 " + hash(dt.Accepted)[:12] + "$", "^307 / 30$"},
		[]string{"^fork-2@7$", "^fix-c$", "^root @ 7$", "^active$", "^open$", "^8..10$", "^10 " + hash(dt.Sibling)[:12] + "$", "^50 / 5$"})
	want("branch | seq | backend | sandbox | from | isolation",
		[]string{"^root$", "^13$", "^local$", "^local-fix$", "^-$", "^" + q("none: local is a development backend")},
		[]string{"^fork-1@7$", "^15$", "^local$", "^local-fix-b$", "^-$", "^" + q("none: local is a development backend")})
	want("branch | own events | head seq | head hash",
		[]string{"^root$", q("1..19 (19)"), "^19$", "^" + hash(dt.Root) + "$"},
		[]string{"^fork-1@7$", q("8..25 (18)"), "^25$", "^" + hash(dt.Accepted) + "$"},
		[]string{"^fork-2@7$", q("8..10 (3)"), "^10$", "^" + hash(dt.Sibling) + "$"})
	want(" | in | out | calls",
		[]string{"^whole tree$", "^657$", "^65$", "^4$"},
		[]string{"^agent coder$"}, []string{"^agent explorer$"}, []string{"^agent researcher$"},
		[]string{"^model embed-1$"}, []string{"^model scripted/m1$"}, []string{"^model scripted/m2$"},
		[]string{"^branch root$"}, []string{"^branch fork-1@7$"}, []string{"^branch fork-2@7$"})

	// Outside tables and code blocks, event text reads as written: one
	// line, no emphasis, code span or HTML opened by it.
	text := dt.Text(t, md)
	for _, s := range []string{
		"seq 16 · validation tests failed: TestAdd still fails: got 6, want 5 --- FAIL: TestAdd (0.00s) calc_test.go:9: Add(2, 3) = 6 | want 5: `a * b` is *not* a sum <calc> __init__ FAIL",
		"The final answer came from branch fork-1@7: closed succeeded at seq 25 (the tests pass), after validation tests passed at seq 23.",
		"Branch root was rejected: validation tests failed at seq 16",
		"seq 19 · closed superseded: forked to fix-b at 7",
		"seq 11 · memory recalled by coder in turn 2 for “how not to fix Add”: fail-1 v1 (score 0.8, written on root at seq 17) “a * b does not fix Add”, note-1 v2 (score 0.5) “Add must be commutative | see ADR-3 Run `go test ./...` before handing over.”",
		"seq 17 · memory written: fail-1 v1 (project:calc): “a * b does not fix Add”; provenance: failed_attempt, validation tests failed (root at seq 16)",
		"fail-1 v1, written on root at seq 17 (scope project:calc); recalled on fork-1@7 at seq 11:",
		"note-1 v2, written outside this tree; recalled on root at seq 4, on fork-1@7 at seq 11:",
		"root seq 1: default/client started the session",
	} {
		if !strings.Contains(text, s) {
			t.Errorf("dossier.md does not show %q; it shows:\n%s", s, text)
		}
	}
	if strings.Contains(text, "(commit -)") || strings.Contains(text, "by rath -") {
		t.Errorf("dossier.md prints unknown build information as -:\n%s", text)
	}
	blocks := dt.CodeBlocks(t, md)
	for _, s := range []string{dt.FailedOutput + "\n", dt.NoteText + "\n", "a * b does not fix Add\n", dt.GoodDiff, "make TestAdd pass <calc & co>\n"} {
		found := false
		for _, b := range blocks {
			found = found || b == s
		}
		if !found {
			t.Errorf("no code block holds %q; blocks: %q", s, blocks)
		}
	}
}

// The header names the exporting build as far as it is known, and leaves
// out what is not.
func TestMarkdownExporter(t *testing.T) {
	d := &dossier.Dossier{Root: "s", Session: "s", Branches: []dossier.Branch{{ID: "s"}}, ExportedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	for _, tc := range []struct {
		env  dossier.Environment
		want string
	}{
		{dossier.Environment{RathVersion: "v0.3.0", RathCommit: "127495a1+dirty", GoVersion: "go1.26.8", OS: "linux", Arch: "amd64", NATSServerVersion: "2.15.2"},
			"**Exported** 2026-01-02 03:04:05Z by rath v0.3.0 (commit 127495a1+dirty), go1.26.8 on linux/amd64, NATS server 2.15.2.\n"},
		{dossier.Environment{RathVersion: "v0.0.0-20261127074055-2d7f4e1e059b+dirty", RathCommit: "2d7f4e1e059b1a77f337ce5423604025fec00200+dirty", GoVersion: "go1.26.8", OS: "linux", Arch: "amd64"},
			"**Exported** 2026-01-02 03:04:05Z by rath (commit 2d7f4e1e059b1a77f337ce5423604025fec00200+dirty), go1.26.8 on linux/amd64.\n"},
		{dossier.Environment{RathCommit: "127495a1", GoVersion: "go1.26.8", OS: "linux", Arch: "amd64"},
			"**Exported** 2026-01-02 03:04:05Z by rath (commit 127495a1), go1.26.8 on linux/amd64.\n"},
		{dossier.Environment{GoVersion: "go1.26.8", OS: "linux", Arch: "amd64"},
			"**Exported** 2026-01-02 03:04:05Z by rath, go1.26.8 on linux/amd64.\n"},
	} {
		d.Environment = tc.env
		if md := dossier.Markdown(d); !strings.Contains(md, tc.want) {
			t.Errorf("environment %+v: dossier.md lacks %q:\n%s", tc.env, tc.want, md)
		}
	}
}

// Branch names are short, distinct and stable: forks numbered in the order
// they were created, whatever their fork points, and a later fork renames
// none.
func TestBranchNames(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	root := "01a20caa-978b-7145-814b-8936962e2a75"
	branches := []dossier.Branch{
		{ID: root, Created: t0},
		{ID: root + "-668eced2", Parent: root, ForkSeq: 40, Created: t0.Add(time.Minute)},
		{ID: root + "-0f0f0f0f", Parent: root + "-668eced2", ForkSeq: 45, Created: t0.Add(3 * time.Minute)},
		{ID: root + "-11111111", Parent: root, ForkSeq: 22, Created: t0.Add(2 * time.Minute)},
		{ID: "other", Created: t0.Add(-time.Hour)},
	}
	want := map[string]string{root: "root", root + "-668eced2": "fork-1@40", root + "-11111111": "fork-2@22", root + "-0f0f0f0f": "fork-3@45", "other": "root-2"}
	got := dossier.BranchNames(branches)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("names %v, want %v", got, want)
	}
	later := append(branches, dossier.Branch{ID: root + "-22222222", Parent: root, ForkSeq: 3, Created: t0.Add(time.Hour)})
	for id, name := range dossier.BranchNames(later) {
		if w, ok := want[id]; ok && w != name {
			t.Errorf("a later fork renamed %s from %s to %s", id, w, name)
		}
	}

	if got := dossier.ReplaceIDs("closed: forked to "+root+"-11111111 at 22; "+root+" superseded; "+root+"x stays; fix stays", got); got != "closed: forked to fork-2@22 at 22; root superseded; "+root+"x stays; fix stays" {
		t.Errorf("ReplaceIDs: %q", got)
	}
	if got := dossier.ReplaceIDs("I will fix Add", map[string]string{"fix": "root"}); got != "I will fix Add" {
		t.Errorf("ReplaceIDs replaced a short ID inside prose: %q", got)
	}
}

// graph.html names branches by their names with the full IDs on hover,
// colours each lane by its status, writes no escaped newline into a
// tooltip, and draws the memory written on one branch and recalled on
// another as an edge from the write to the recall.
func TestGraph(t *testing.T) {
	d, dir, _ := exported(t)
	page := string(mustRead(t, filepath.Join(dir, dossier.FileHTML)))
	svg := dossier.Graph(d)
	for _, s := range []string{
		`fill="#8d6e63" font-weight="bold"><title>fix: closed (superseded); verdict rejected: validation tests failed at seq 16: TestAdd still fails`,
		`font-weight="bold"><title>fix-b: closed (succeeded); verdict accepted`,
		`>root</text>`, `>fork-1@7</text>`, `>fork-2@7</text>`,
		`<title>memory fail-1 v1, written on root at 17, recalled on fork-1@7 at 11: a * b does not fix Add</title>`,
		`<title>root at 17: memory written, fail-1 v1 (project:calc): a * b does not fix Add</title>`,
		`<title>fork-1@7 at 11: coder recalled 2 items for “how not to fix Add”: fail-1 v1 “a * b does not fix Add”; note-1 v2 “Add must be commutative | see ADR-3 Run `,
	} {
		if !strings.Contains(svg, s) {
			t.Errorf("graph.svg lacks %q", s)
		}
	}
	if strings.Contains(svg, `\n`) {
		t.Errorf("a tooltip shows an escaped newline:\n%s", svg)
	}
	if !strings.Contains(page, svg) || !strings.Contains(page, `<td><code>fix-b</code></td>`) || !strings.Contains(page, `>fork-1@7</b></td>`) {
		t.Errorf("graph.html does not hold the graph and the branch table by name and ID:\n%s", page)
	}
}

func dumpTables(ts []dt.Table) string {
	var b strings.Builder
	for _, tb := range ts {
		fmt.Fprintf(&b, "%q\n", tb.Header)
		for _, r := range tb.Rows {
			fmt.Fprintf(&b, "  %q\n", r)
		}
	}
	return b.String()
}

// A decision a served router chose says so in the story: who routed. One
// without a reason ends at its route, not in a bare dash.
func TestMarkdownNamesTheRouter(t *testing.T) {
	at := dossier.At{Branch: "s", Seq: 4}
	d := &dossier.Dossier{Root: "s", Session: "s", Branches: []dossier.Branch{{ID: "s"}}, Decisions: []dossier.Decision{
		{At: at, Rule: "triage", Route: "agent:coder", Reason: "a bug", Router: "triage"},
		{At: dossier.At{Branch: "s", Seq: 9}, Rule: "done", Route: "close:succeeded", Reason: "tests pass"},
		{At: dossier.At{Branch: "s", Seq: 11}, Rule: "start", Route: "agent:researcher"},
	}}
	md := dossier.Markdown(d)
	if !strings.Contains(md, "selector: rule `triage` → route `agent:coder` (chosen by router `triage`): a bug") ||
		!strings.Contains(md, "selector: rule `done` → route `close:succeeded`: tests pass") ||
		!strings.Contains(md, "selector: rule `start` → route `agent:researcher`\n") {
		t.Fatalf("dossier.md:\n%s", md)
	}
}
