package dossier

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/openrath/rath/pkg/events"
)

// Markdown tells the dossier for people: the outcome, the graph, each
// branch's story in sequence order, the rejected branches and why, the
// accepted patch, the test result, memory, token usage and the chain heads.
//
// It is GitHub-flavoured Markdown whose every table row keeps its columns:
// text from events is written on one line with Markdown's syntax characters
// escaped (inline, cell), and what must keep its lines (test output, diffs,
// memory texts, the task) goes into fenced blocks below the tables (block).
// Branches are called by their names (BranchNames); the branch table gives
// each one's full session ID.
func Markdown(d *Dossier) string {
	var s strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&s, format, args...) }
	n := newNamer(d)
	headSection(w, d, n)
	outcomeSection(w, d, n)
	domainSection(w, d, n)
	experimentsSection(w, d, n)
	graphSection(w, d, n)
	storySection(w, d, n)
	rejectedSection(w, d, n)
	calls := acceptedCalls(d)
	patchSection(w, d, n, calls)
	testSection(w, d, n, calls)
	w("## Sandboxes\n\n")
	sandboxes(w, d, n)

	w("## Memory\n\n")
	memorySection(w, d, n)

	peopleSection(w, d, n)
	workSection(w, d, n)
	actorsSection(w, d, n)
	usageSection(w, d, n)
	headsSection(w, d, n)
	return s.String()
}

// headSection writes the title, the task, the workflow and who exported it.
func headSection(w func(string, ...any), d *Dossier, n namer) {
	w("# Dossier of session %s\n\n", d.Root)
	if d.Session != d.Root {
		w("Exported for session `%s` (branch %s) of the tree of `%s`.\n\n", d.Session, n.of(d.Session), d.Root)
	}
	if d.Task != "" {
		w("**Task:**\n\n%s\n", block(clip(d.Task, 4000), "text"))
	}
	if wf := d.Workflow; wf != nil {
		w("**Workflow:** %s, hash %s, bundle %s\n\n", inline(orDash(wf.Name), 200), code(wf.Hash), code(wf.Ref))
	}
	w("**Exported** %s by %s.\n\n", d.ExportedAt.Format("2006-01-02 15:04:05Z07:00"), exporter(d.Environment))
}

// outcomeSection writes which branch gave the final answer, and the rejected ones.
func outcomeSection(w func(string, ...any), d *Dossier, n namer) {
	w("## Outcome\n\n")
	if f := d.Final; f != nil {
		w("The final answer came from branch **%s**: closed `%s` at seq %d", n.of(f.Branch), inline(f.Outcome, 80), f.Close.Seq)
		if f.Reason != "" {
			w(" (%s)", inline(n.text(f.Reason), 300))
		}
		if v := f.Validation; v != nil {
			w(", after validation `%s` passed at seq %d", inline(v.Validator, 80), v.Seq)
			if v.Branch != f.Branch {
				w(" (branch %s)", n.of(v.Branch))
			}
			w(".\n\n")
		} else {
			w("; no validation ran before the close.\n\n")
		}
	} else {
		w("No branch produced a final answer: none was closed with a successful outcome after a passing validation.\n\n")
	}
	for _, b := range d.Branches {
		if b.Verdict == VerdictRejected {
			w("- Branch **%s** was rejected: %s (see [why](#rejected-branches-and-why)).\n", n.of(b.ID), inline(n.text(b.VerdictReason), 160))
		}
	}
}

// graphSection writes the session graph and the branch table.
func graphSection(w func(string, ...any), d *Dossier, n namer) {
	w("\n## Session graph\n\n![session graph](%s) (also [%s](%s))\n\n", FileSVG, FileHTML, FileHTML)
	w("| branch | session ID | parent @ fork | status | verdict | own events | head | tokens in/out |\n|---|---|---|---|---|---|---|---|\n")
	for _, b := range d.Branches {
		parent := "-"
		if b.Parent != "" {
			parent = fmt.Sprintf("%s @ %d", n.of(b.Parent), b.ForkSeq)
		}
		w("| %s | `%s` | %s | %s | %s | %d..%d | %d `%s` | %d / %d |\n", n.of(b.ID), b.ID, parent, cell(inline(statusText(b), 120)),
			cell(verdictLine(b, n, 160)), b.FirstSeq, b.Head.Seq, b.Head.Seq, short(b.Head.Hash), b.Usage.Total.In, b.Usage.Total.Out)
	}
}

// storySection writes each branch's story in sequence order.
func storySection(w func(string, ...any), d *Dossier, n namer) {
	w("\n## The story, branch by branch\n\n")
	for _, b := range d.Branches {
		w("### %s\n\n", n.of(b.ID))
		if b.Parent != "" {
			w("Session `%s`, forked from %s at seq %d", b.ID, n.of(b.Parent), b.ForkSeq)
			if b.ForkReason != "" {
				w(": %s", inline(n.text(b.ForkReason), 300))
			}
			w(". ")
		} else {
			w("Session `%s`, a root. ", b.ID)
		}
		w("Verdict: %s\n\n", sentence(verdictLine(b, n, 160)))
		for _, l := range story(d, b, n) {
			w("- %s\n", l.text)
		}
		w("\n")
	}
}

// rejectedSection writes the rejected and superseded branches and why.
func rejectedSection(w func(string, ...any), d *Dossier, n namer) {
	w("## Rejected branches and why\n\n")
	rejected := false
	for _, b := range d.Branches {
		if b.Verdict != VerdictRejected && b.Verdict != VerdictSuperseded {
			continue
		}
		rejected = true
		last := lastValidation(d, b.ID)
		switch {
		case b.Verdict == VerdictRejected && last != nil:
			w("**%s** (rejected): validation `%s` failed at seq %d", n.of(b.ID), inline(last.Validator, 80), last.Seq)
		default:
			w("**%s** (%s)%s", n.of(b.ID), b.Verdict, because(n.text(b.VerdictReason)))
		}
		if b.ClosedSeq != 0 && b.Verdict == VerdictRejected {
			w("; closed `%s` at seq %d%s", inline(b.Outcome, 80), b.ClosedSeq, because(n.text(b.CloseReason)))
		}
		w(".\n\n")
		if b.Verdict == VerdictRejected && last != nil {
			if last.Reason != "" {
				w("What the validator said:\n\n%s\n", block(clip(last.Reason, 8000), "text"))
			}
			if len(last.Details) > 0 {
				w("Its details:\n\n%s\n", block(clip(string(last.Details), 4000), "json"))
			}
		}
	}
	if !rejected {
		w("None.\n\n")
	}
}

// patchSection writes the diffs of the accepted path's tool calls.
func patchSection(w func(string, ...any), d *Dossier, n namer, calls []ToolCall) {
	w("## The accepted patch\n\n")
	patched := false
	for _, t := range calls {
		diff := fullDiff(d, t)
		if diff == "" {
			continue
		}
		patched = true
		w("Tool call `%s` (%s by %s), %s at seq %d, files %s:\n\n%s\n", inline(t.CallID, 120), inline(t.Tool, 80), inline(orDash(t.Agent), 80),
			n.of(t.Branch), t.Seqs[len(t.Seqs)-1], inline(strings.Join(t.Files, ", "), 300), block(diff, "diff"))
	}
	if !patched {
		if d.Final == nil {
			w("No accepted branch.\n\n")
		} else {
			w("The accepted path changed no file.\n\n")
		}
	}
}

// testSection writes the accepted validation and the last tool call before the close.
func testSection(w func(string, ...any), d *Dossier, n namer, calls []ToolCall) {
	w("## The test result\n\n")
	if d.Final != nil && d.Final.Validation != nil {
		v := d.Final.Validation
		w("Validation `%s` passed at seq %d (branch %s)", inline(v.Validator, 80), v.Seq, n.of(v.Branch))
		if v.Target != "" {
			w(" on %s", code(oneLine(v.Target, 200)))
		}
		w(".\n\n")
		if len(v.Details) > 0 {
			w("%s\n", block(clip(string(v.Details), 4000), "json"))
		}
	}
	if t := lastRun(calls, d.Final); t != nil {
		ended := fmt.Sprintf("exit code %d", t.ExitCode)
		switch {
		case t.Status == ToolFailed && t.ExitCode == 0:
			ended = "failed"
		case t.Status == ToolFailed:
			ended = "failed, " + ended
		}
		w("The last tool call before the close: `%s` %s (%s at seq %d), %s:\n\n%s\n",
			inline(t.Tool, 80), code(oneLine(string(t.Arguments), 300)), n.of(t.Branch), t.Seqs[len(t.Seqs)-1], ended, block(clip(orError(t), 4000), "text"))
	} else if d.Final == nil {
		w("No accepted branch.\n\n")
	}
}

// actorsSection writes each branch's actors and what they are answerable for.
func actorsSection(w func(string, ...any), d *Dossier, n namer) {
	w("## Who acted\n\nAs the ledger authenticated each proposer (tenant/user) and stamped it on the event; a name an event claims for itself is shown as “claims”.\n\n")
	for _, b := range d.Branches {
		counts := make([]string, len(b.Actors))
		for i, a := range b.Actors {
			counts[i] = fmt.Sprintf("%s %d", a.Actor, a.Events)
		}
		tenant := ""
		if b.Tenant != "" {
			tenant = " (tenant " + inline(b.Tenant, 80) + ")"
		}
		w("- %s%s: %s\n", n.of(b.ID), tenant, inline(orDash(strings.Join(counts, ", ")), 400))
	}
	if len(d.Acts) > 0 {
		w("\n")
	}
	for _, a := range d.Acts {
		w("- %s\n", actLine(a, n))
	}
}

// usageSection writes the tokens by tree, agent, model, branch and on the accepted path.
func usageSection(w func(string, ...any), d *Dossier, n namer) {
	w("\n## Token usage\n\nEach model call counts once, in the branch that stored it (a fork's inherited events belong to its parent).\n\n")
	w("| | in | out | calls |\n|---|---|---|---|\n")
	w("| **whole tree** | %d | %d | %d |\n", d.Usage.Total.Total.In, d.Usage.Total.Total.Out, d.Usage.Total.Total.Calls)
	for _, k := range sortedKeys(d.Usage.Total.ByAgent) {
		t := d.Usage.Total.ByAgent[k]
		w("| agent %s | %d | %d | %d |\n", cell(inline(k, 80)), t.In, t.Out, t.Calls)
	}
	for _, k := range sortedKeys(d.Usage.Total.ByModel) {
		t := d.Usage.Total.ByModel[k]
		w("| model %s | %d | %d | %d |\n", cell(inline(k, 120)), t.In, t.Out, t.Calls)
	}
	for _, b := range d.Branches {
		t := d.Usage.ByBranch[b.ID].Total
		w("| branch %s | %d | %d | %d |\n", n.of(b.ID), t.In, t.Out, t.Calls)
	}
	if p := d.Usage.AcceptedPath; p != nil {
		w("\nOn the accepted path (the logical log of %s):\n\n| agent | in | out | calls |\n|---|---|---|---|\n", n.of(p.Branch))
		for _, k := range sortedKeys(p.Usage.ByAgent) {
			t := p.Usage.ByAgent[k]
			w("| %s | %d | %d | %d |\n", cell(inline(k, 80)), t.In, t.Out, t.Calls)
		}
		w("| **total** | %d | %d | %d |\n", p.Usage.Total.In, p.Usage.Total.Out, p.Usage.Total.Calls)
	}
}

// headsSection writes each branch's hash-chain head.
func headsSection(w func(string, ...any), d *Dossier, n namer) {
	w("\n## Hash-chain heads\n\n| branch | own events | head seq | head hash |\n|---|---|---|---|\n")
	for _, b := range d.Branches {
		w("| %s | %d..%d (%d) | %d | `%s` |\n", n.of(b.ID), b.FirstSeq, b.Head.Seq, b.Events, b.Head.Seq, b.Head.Hash)
	}
	w("\nCheck this dossier offline: `rath verify --dossier <this directory>`.\n")
}

// exporter names the exporting program and where it ran, leaving out what
// the build did not record (a binary built without version control
// information has no commit).
func exporter(e Environment) string {
	by := "rath"
	// A pseudo-version (v0.0.0-20261127074055-2d7f4e1e059b+dirty) says
	// no more than the commit beside it.
	if v := e.RathVersion; v != "" && (len(e.RathCommit) < 12 || !strings.Contains(v, e.RathCommit[:12])) {
		by += " " + v
	}
	if e.RathCommit != "" {
		by += " (commit " + e.RathCommit + ")"
	}
	var on []string
	if e.GoVersion != "" {
		on = append(on, e.GoVersion)
	}
	if e.OS != "" || e.Arch != "" {
		on = append(on, "on "+e.OS+"/"+e.Arch)
	}
	if len(on) > 0 {
		by += ", " + strings.Join(on, " ")
	}
	if e.NATSServerVersion != "" {
		by += ", NATS server " + e.NATSServerVersion
	}
	return inline(by, 400)
}

// statusText is a branch's status and its close outcome.
func statusText(b Branch) string {
	if b.Outcome != "" {
		return b.Status + " (" + b.Outcome + ")"
	}
	return b.Status
}

// verdictLine is a branch's verdict in bold and its reason on one line, cut
// to n runes.
func verdictLine(b Branch, nm namer, n int) string {
	if b.VerdictReason == "" {
		return "**" + b.Verdict + "**"
	}
	return "**" + b.Verdict + "**: " + inline(nm.text(b.VerdictReason), n)
}

// sentence ends s with a full stop, unless it ends cut short (…).
func sentence(s string) string {
	if strings.HasSuffix(s, "…") || strings.HasSuffix(s, ".") {
		return s
	}
	return s + "."
}

// lastValidation is the last validation a branch stored (nil: none).
func lastValidation(d *Dossier, branch string) *Validation {
	var last *Validation
	for i := range d.Validations {
		if d.Validations[i].Branch == branch {
			last = &d.Validations[i]
		}
	}
	return last
}

type storyLine struct {
	seq  uint64
	text string
}

// story lists a branch's own key events in sequence order, one line each.
func story(d *Dossier, b Branch, n namer) []storyLine {
	var out []storyLine
	add := func(seq uint64, format string, args ...any) {
		out = append(out, storyLine{seq, fmt.Sprintf("seq %d · ", seq) + fmt.Sprintf(format, args...)})
	}
	for _, t := range d.Turns {
		if t.Branch != b.ID {
			continue
		}
		if t.RequestedIn == nil {
			add(t.Seq, "turn %d requested: agent **%s** (rule %s)", t.Number, inline(t.Agent, 80), inline(orDash(t.Rule), 80))
		}
		switch t.Status {
		case TurnCompleted:
			line := fmt.Sprintf("turn %d completed: %s, %s", t.Number, inline(t.Agent, 80), plural(t.ToolCalls, "tool call"))
			if t.Answer != "" {
				line += ": " + quote(t.Answer, 200)
			}
			add(t.EndSeq, "%s", line)
		case TurnFailed:
			add(t.EndSeq, "turn %d failed: %s: %s", t.Number, inline(t.Agent, 80), inline(t.Error, 200))
		}
	}
	for _, t := range d.ToolCalls {
		if t.Branch != b.ID {
			continue
		}
		line := fmt.Sprintf("tool call %s %s by %s, arguments %s", code(t.CallID), inline(t.Tool, 80), inline(orDash(t.Agent), 80), code(oneLine(string(t.Arguments), 160)))
		switch t.Status {
		case ToolCompleted:
			line += fmt.Sprintf(" → exit %d", t.ExitCode)
			if len(t.Files) > 0 {
				line += ", changed " + inline(strings.Join(t.Files, ", "), 300)
			}
			if t.Result != "" {
				line += ": " + quote(t.Result, 120)
			}
		case ToolFailed:
			if t.ExitCode != 0 {
				line += fmt.Sprintf(" → failed (exit %d): %s", t.ExitCode, inline(t.Error, 160))
			} else {
				line += " → failed: " + inline(t.Error, 160)
			}
		default:
			line += " → " + inline(t.Status, 40)
		}
		switch {
		case t.Runner == events.RunnerCaller && t.Sandbox != nil:
			line += fmt.Sprintf(" [run by the caller, outside Rath's sandbox; the caller reports sandbox %s/%s]", inline(t.Sandbox.Backend, 40), inline(t.Sandbox.SandboxID, 200))
		case t.Runner == events.RunnerCaller:
			line += " [run by the caller, outside Rath's sandbox]"
		case t.Sandbox != nil:
			line += fmt.Sprintf(" [sandbox %s/%s]", inline(t.Sandbox.Backend, 40), inline(t.Sandbox.SandboxID, 200))
		}
		add(t.Seqs[len(t.Seqs)-1], "%s", line)
	}
	for _, p := range d.Sandboxes {
		if p.Branch != b.ID {
			continue
		}
		what := "sandbox placed"
		if p.From != nil {
			what = fmt.Sprintf("sandbox moved from %s %s", inline(p.From.Backend, 40), inline(p.From.SandboxID, 200))
		}
		add(p.Seq, "%s: %s %s on %s, workspace %s at commit %s (%s); isolation: %s", what, inline(p.Backend, 40), inline(p.SandboxID, 200),
			inline(orDash(p.Host), 120), inline(orDash(p.Workspace), 300), short(p.Commit), inline(orDash(n.text(p.Reason)), 300), isolationText(p))
	}
	for _, m := range d.Memory {
		if m.Branch == b.ID {
			add(m.Seq, "%s", memoryLine(d, m, n))
		}
	}
	for _, v := range d.Validations {
		if v.Branch != b.ID {
			continue
		}
		if v.Passed {
			add(v.Seq, "validation **%s passed**", inline(v.Validator, 80))
		} else {
			add(v.Seq, "validation **%s failed**: %s", inline(v.Validator, 80), inline(v.Reason, 160))
		}
	}
	for _, dec := range d.Decisions {
		if dec.Branch == b.ID {
			by := ""
			if dec.Router != "" {
				by = " (chosen by router " + code(dec.Router) + ")"
			}
			add(dec.Seq, "selector: rule %s → route %s%s%s", code(dec.Rule), code(dec.Route), by, because(n.text(dec.Reason)))
		}
	}
	for _, iv := range d.Interventions {
		if iv.Branch == b.ID {
			add(iv.Seq, "%s", interventionLine(iv, n))
		}
	}
	for _, m := range b.Merges {
		add(m.Seq, "merged %s up to %d (%s)%s", n.of(m.Source), m.SourceHead.Seq, plural(m.Events, "event"), because(n.text(m.Reason)))
	}
	if b.ClosedSeq != 0 {
		add(b.ClosedSeq, "closed %s%s", code(b.Outcome), because(n.text(b.CloseReason)))
	}
	slices.SortStableFunc(out, func(a, b storyLine) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

func actLine(a Act, n namer) string {
	actor := inline(orDash(a.Actor), 120)
	if a.OnBehalf != "" {
		actor = fmt.Sprintf("%s (through %s)", inline(a.OnBehalf, 120), actor)
	}
	line := fmt.Sprintf("%s seq %d: %s %s", n.of(a.Branch), a.Seq, actor, inline(n.text(a.What), 200))
	if a.Detail != "" {
		line += ": " + inline(n.text(a.Detail), 160)
	}
	if a.By != "" {
		line += fmt.Sprintf(" (claims “%s”)", inline(a.By, 80))
	}
	return line
}

// memoryLine is a memory event on one line (without its branch and seq):
// what was recalled, with the start of each item's text, what was written
// or retracted.
func memoryLine(d *Dossier, m Memory, n namer) string {
	switch m.Kind {
	case MemoryRecalled:
		turn := ""
		if m.Turn > 0 {
			turn = fmt.Sprintf(" in turn %d", m.Turn)
		}
		line := fmt.Sprintf("memory recalled by %s%s for %s: ", inline(orDash(m.Agent), 80), turn, queryText(d, m.Query))
		if len(m.Items) == 0 {
			return line + "nothing"
		}
		items := make([]string, len(m.Items))
		for i, it := range m.Items {
			items[i] = fmt.Sprintf("%s v%d (score %.3g", code(it.ItemID), it.Version, it.Score)
			if w := writeOf(d, it.ItemID, it.Version); w != nil {
				items[i] += fmt.Sprintf(", written on %s at seq %d", n.of(w.Branch), w.Seq)
			}
			items[i] += ")"
			if it.Content != "" {
				items[i] += " " + quote(it.Content, 100)
			}
		}
		return line + strings.Join(items, ", ")
	case MemoryWritten:
		prov := ""
		if p := m.Provenance; p != nil {
			prov = fmt.Sprintf("; provenance: %s, %s", inline(p.Evidence, 80), evidenceText(d, p.Session, p.EventIDs, n))
		}
		return fmt.Sprintf("memory written: %s v%d (%s): %s%s", code(m.ItemID), m.Version, inline(orDash(m.Scope), 120), quote(m.Content, 160), prov)
	default:
		return fmt.Sprintf("memory retracted: %s v%d by %s: %s", code(m.ItemID), m.Version, inline(m.By, 80), inline(m.Reason, 200))
	}
}

// queryText is a recall's query, quoted, or "the task" when it was the
// task (a workflow recalls for the task; printing it again and again says
// nothing).
func queryText(d *Dossier, query string) string {
	if q := strings.TrimSpace(query); q != "" && q == strings.TrimSpace(d.Task) {
		return "the task"
	}
	return quote(query, 80)
}

// evidenceText names the events a memory write's provenance cites: by
// branch and seq when the dossier holds them.
func evidenceText(d *Dossier, session string, ids []string, n namer) string {
	if len(ids) == 0 {
		return "session " + code(n.of(session))
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = "event " + code(id)
		if at, what := eventByID(d, id); at != nil {
			out[i] = fmt.Sprintf("%s (%s at seq %d)", what, n.of(at.Branch), at.Seq)
		}
	}
	if _, held := n[session]; !held {
		return "session " + code(session) + ", " + strings.Join(out, ", ")
	}
	return strings.Join(out, ", ")
}

// eventByID finds an event the dossier lists by its ID, and says what it is.
func eventByID(d *Dossier, id string) (*At, string) {
	for i, v := range d.Validations {
		if v.EventID == id {
			what := "validation " + inline(v.Validator, 80) + " passed"
			if !v.Passed {
				what = "validation " + inline(v.Validator, 80) + " failed"
			}
			return &d.Validations[i].At, what
		}
	}
	for i, a := range d.Acts {
		if a.EventID == id {
			return &d.Acts[i].At, inline(a.What, 120)
		}
	}
	for i, t := range d.ToolCalls {
		if t.EventID == id {
			return &d.ToolCalls[i].At, "tool call " + code(t.CallID)
		}
	}
	for i, dec := range d.Decisions {
		if dec.EventID == id {
			return &d.Decisions[i].At, "selector decision " + code(dec.Rule)
		}
	}
	return nil, ""
}

// writeOf is the write of an item's version on this tree (nil: it was
// written elsewhere, before this run say).
func writeOf(d *Dossier, item string, version int) *Memory {
	for i, m := range d.Memory {
		if m.Kind == MemoryWritten && m.ItemID == item && m.Version == version {
			return &d.Memory[i]
		}
	}
	return nil
}

// memorySection tells each item version the tree recalled or wrote, with
// its whole text, where it was written and where recalled (a fork recalling
// what an abandoned branch learnt is the point of memory with provenance),
// then lists the memory events.
func memorySection(w func(string, ...any), d *Dossier, n namer) {
	if len(d.Memory) == 0 {
		w("No memory events.\n\n")
		return
	}
	type item struct {
		id       string
		version  int
		content  string
		write    *Memory
		branches []string            // recalling branches, in order
		recalls  map[string][]string // branch → seqs
	}
	var items []*item
	find := func(id string, version int) *item {
		for _, it := range items {
			if it.id == id && it.version == version {
				return it
			}
		}
		it := &item{id: id, version: version, recalls: map[string][]string{}}
		items = append(items, it)
		return it
	}
	for i, m := range d.Memory {
		switch m.Kind {
		case MemoryRecalled:
			for _, r := range m.Items {
				it := find(r.ItemID, r.Version)
				if it.content == "" {
					it.content = r.Content
				}
				if _, ok := it.recalls[m.Branch]; !ok {
					it.branches = append(it.branches, m.Branch)
				}
				it.recalls[m.Branch] = append(it.recalls[m.Branch], fmt.Sprint(m.Seq))
			}
		case MemoryWritten:
			it := find(m.ItemID, m.Version)
			it.content, it.write = m.Content, &d.Memory[i]
		}
	}
	for _, it := range items {
		w("%s v%d", code(it.id), it.version)
		if it.write != nil {
			w(", written on %s at seq %d (scope %s)", n.of(it.write.Branch), it.write.Seq, inline(orDash(it.write.Scope), 120))
		} else {
			w(", written outside this tree")
		}
		for i, b := range it.branches {
			sep := "; recalled on "
			if i > 0 {
				sep = ", on "
			}
			w("%s%s at seq %s", sep, n.of(b), strings.Join(it.recalls[b], ", "))
		}
		if it.content == "" {
			w("; its text is not recorded.\n\n")
			continue
		}
		w(":\n\n%s\n", block(clip(it.content, 4000), "text"))
	}
	w("The memory events:\n\n")
	for _, m := range d.Memory {
		w("- %s seq %d: %s\n", n.of(m.Branch), m.Seq, memoryLine(d, m, n))
	}
	w("\n")
}

// acceptedCalls are the tool calls on the final branch's logical log, in
// sequence order.
func acceptedCalls(d *Dossier) []ToolCall {
	if d.Final == nil || d.tree == nil {
		return nil
	}
	var out []ToolCall
	for _, seg := range d.tree.Path(d.Final.Branch) {
		for _, t := range d.ToolCalls {
			if t.Branch == seg.Session && t.Seq >= seg.From && t.Seq <= seg.To {
				out = append(out, t)
			}
		}
	}
	return out
}

// lastRun is the last completed or failed call before the final close.
func lastRun(calls []ToolCall, f *Final) *ToolCall {
	if f == nil {
		return nil
	}
	for i := len(calls) - 1; i >= 0; i-- {
		t := calls[i]
		// todo keeps the list of work; it tests nothing.
		if (t.Status == ToolCompleted || t.Status == ToolFailed) && t.Seqs[len(t.Seqs)-1] < f.Close.Seq && t.Tool != "todo" {
			return &calls[i]
		}
	}
	return nil
}

// fullDiff is a call's whole diff: the blob when the dossier holds it.
func fullDiff(d *Dossier, t ToolCall) string {
	if d.tree != nil && t.DiffRef != "" {
		if b, ok := d.tree.blobs[t.DiffRef]; ok {
			return string(b)
		}
	}
	return t.Diff
}

func orError(t *ToolCall) string {
	if t.Status == ToolFailed {
		return t.Error
	}
	return t.Result
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "\n… (cut; the whole text is in the events)"
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// inline is text from an event for a line of Markdown: on one line, cut to
// n runes, with what would start Markdown syntax escaped, so that it reads
// as written and cannot open emphasis, a link, a code span or HTML that
// runs past it. Pipes are escaped too, so it can stand in a table cell.
// The writer never starts a line with it, where '#', '>' or '-' would
// start a block.
// because is ": " and the reason a story line gives, inline, or nothing
// when it gives none: a line does not end in a bare dash.
func because(reason string) string {
	if strings.TrimSpace(reason) == "" {
		return ""
	}
	return ": " + inline(reason, 300)
}

func inline(s string, n int) string {
	s = oneLine(s, n)
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '\\', '`', '*', '[', ']', '<', '|', '~':
			b.WriteByte('\\')
		case '_':
			// Inside a word (slug_test.go) an underscore opens nothing.
			if i == 0 || i == len(s)-1 || !alnum(s[i-1]) || !alnum(s[i+1]) {
				b.WriteByte('\\')
			}
		case '&':
			// Only an entity (&amp; &#35;) would be read as one.
			if i+1 < len(s) && (alnum(s[i+1]) || s[i+1] == '#') {
				b.WriteByte('\\')
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// quote is inline text between quotation marks.
func quote(s string, n int) string { return "“" + inline(s, n) + "”" }

// code is s (one line) as a code span, fenced by a run of backticks longer
// than any in s; "-" for an empty s. For text outside tables: in a table
// cell a pipe, even in a code span, would need escaping.
func code(s string) string {
	if s == "" {
		return "-"
	}
	fence := strings.Repeat("`", longestRun(s, '`')+1)
	if s[0] == '`' || s[len(s)-1] == '`' || s[0] == ' ' && s[len(s)-1] == ' ' {
		s = " " + s + " "
	}
	return fence + s + fence
}

// block is s as a fenced code block with an info string, its fence longer
// than any run of backticks in s, ending in a blank line.
func block(s, info string) string {
	fence := strings.Repeat("`", max(3, longestRun(s, '`')+1))
	if s != "" && !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return fence + info + "\n" + s + fence + "\n"
}

func longestRun(s string, c byte) int {
	best, run := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			run++
			best = max(best, run)
		} else {
			run = 0
		}
	}
	return best
}

// cell is Markdown text (from inline and code) for a table cell: a line
// break would end the row, so any left is written as <br>.
func cell(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.ReplaceAll(s, "\n", "<br>")
}

// isolationText says what a placement isolated; a development backend is
// said to be one.
func isolationText(p Placement) string {
	switch {
	case p.Development:
		return fmt.Sprintf("**none**: %s is a development backend, commands ran as the tool runner's user on %s", inline(p.Backend, 40), inline(orDash(p.Host), 120))
	case p.Isolation == "":
		return "not recorded"
	}
	return inline(p.Isolation, 1000)
}

// sandboxes lists where each branch's tools ran and what that isolated,
// warning first when any ran on a development backend.
func sandboxes(w func(string, ...any), d *Dossier, n namer) {
	if len(d.Sandboxes) == 0 {
		w("No tool ran in a sandbox.\n\n")
		return
	}
	var dev []string
	for _, p := range d.Sandboxes {
		if p.Development && !slices.Contains(dev, n.of(p.Branch)) {
			dev = append(dev, n.of(p.Branch))
		}
	}
	if len(dev) > 0 {
		w("**Not isolated:** branch %s ran tools on a development backend (local), which isolates nothing: its commands ran as the tool runner's user, with that user's access to the host's files and network.\n\n", strings.Join(dev, ", "))
	}
	w("| branch | seq | backend | sandbox | from | isolation |\n|---|---|---|---|---|---|\n")
	for _, p := range d.Sandboxes {
		from := "-"
		if p.From != nil {
			from = inline(p.From.Backend+" "+p.From.SandboxID, 200)
		}
		w("| %s | %d | %s | %s | %s | %s |\n", n.of(p.Branch), p.Seq, cell(inline(p.Backend, 40)), cell(inline(p.SandboxID, 200)), cell(from), cell(isolationText(p)))
	}
	w("\n")
}
