package dossier

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Markdown tells the dossier for people: the outcome, the graph, each
// branch's story in sequence order, the rejected branches and why, the
// accepted patch, the test result, memory, token usage and the chain heads.
func Markdown(d *Dossier) string {
	var s strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&s, format, args...) }
	w("# Dossier of session %s\n\n", d.Root)
	if d.Session != d.Root {
		w("Exported for session `%s` (root `%s`).\n\n", d.Session, d.Root)
	}
	if d.Task != "" {
		w("**Task:** %s\n\n", oneLine(d.Task, 500))
	}
	if wf := d.Workflow; wf != nil {
		w("**Workflow:** %s, hash `%s`, bundle `%s`\n\n", orDash(wf.Name), orDash(wf.Hash), orDash(wf.Ref))
	}
	e := d.Environment
	w("**Exported** %s by rath %s (commit %s), %s on %s/%s, NATS server %s.\n\n",
		d.ExportedAt.Format("2006-01-02 15:04:05Z07:00"), orDash(e.RathVersion), orDash(e.RathCommit), e.GoVersion, e.OS, e.Arch, orDash(e.NATSServerVersion))

	w("## Outcome\n\n")
	if f := d.Final; f != nil {
		w("The final answer came from branch **%s**: closed `%s` at seq %d", f.Branch, f.Outcome, f.Close.Seq)
		if f.Reason != "" {
			w(" (%s)", f.Reason)
		}
		if v := f.Validation; v != nil {
			w(", after validation `%s` passed at seq %d (branch %s).\n\n", v.Validator, v.Seq, v.Branch)
		} else {
			w("; no validation ran before the close.\n\n")
		}
	} else {
		w("No branch produced a final answer: none was closed with a successful outcome after a passing validation.\n\n")
	}
	for _, b := range d.Branches {
		if b.Verdict == VerdictRejected {
			w("- Branch **%s** was rejected: %s.\n", b.ID, b.VerdictReason)
		}
	}
	w("\n## Session graph\n\n![session graph](%s) (also [%s](%s))\n\n", FileSVG, FileHTML, FileHTML)
	w("| branch | parent @ fork | status | verdict | own events | head | tokens in/out |\n|---|---|---|---|---|---|---|\n")
	for _, b := range d.Branches {
		parent := "root"
		if b.Parent != "" {
			parent = fmt.Sprintf("%s @ %d", b.Parent, b.ForkSeq)
		}
		status := b.Status
		if b.Outcome != "" {
			status += " (" + b.Outcome + ")"
		}
		w("| %s | %s | %s | %s | %d..%d | %d `%s` | %d / %d |\n", b.ID, parent, status, cell(verdictText(b)),
			b.FirstSeq, b.Head.Seq, b.Head.Seq, short(b.Head.Hash), b.Usage.Total.In, b.Usage.Total.Out)
	}

	w("\n## The story, branch by branch\n\n")
	for _, b := range d.Branches {
		w("### %s\n\n", b.ID)
		if b.Parent != "" {
			w("Forked from %s at seq %d", b.Parent, b.ForkSeq)
			if b.ForkReason != "" {
				w(": %s", b.ForkReason)
			}
			w(". ")
		} else {
			w("Root session. ")
		}
		w("Verdict: **%s**.\n\n", verdictText(b))
		for _, l := range story(d, b) {
			w("- %s\n", l.text)
		}
		w("\n")
	}

	w("## Rejected branches and why\n\n")
	rejected := false
	for _, b := range d.Branches {
		if b.Verdict != VerdictRejected && b.Verdict != VerdictSuperseded {
			continue
		}
		rejected = true
		w("- **%s** (%s): %s", b.ID, b.Verdict, orDash(b.VerdictReason))
		if b.ClosedSeq != 0 && b.Verdict == VerdictRejected {
			w("; closed `%s` at %d: %s", b.Outcome, b.ClosedSeq, orDash(b.CloseReason))
		}
		w(".\n")
		for _, v := range d.Validations {
			if v.Branch == b.ID && !v.Passed && len(v.Details) > 0 {
				w("\n  Details of validation %s at %d:\n\n  ```json\n  %s\n  ```\n", v.Validator, v.Seq, oneLine(string(v.Details), 4000))
			}
		}
	}
	if !rejected {
		w("None.\n")
	}

	w("\n## The accepted patch\n\n")
	calls := acceptedCalls(d)
	patched := false
	for _, t := range calls {
		diff := fullDiff(d, t)
		if diff == "" {
			continue
		}
		patched = true
		w("Tool call `%s` (%s by %s), %s at %d, files %s:\n\n```diff\n%s```\n\n", t.CallID, t.Tool, orDash(t.Agent), t.Branch, t.Seqs[len(t.Seqs)-1],
			strings.Join(t.Files, ", "), ensureNewline(diff))
	}
	if !patched {
		if d.Final == nil {
			w("No accepted branch.\n\n")
		} else {
			w("The accepted path changed no file.\n\n")
		}
	}

	w("## The test result\n\n")
	if d.Final != nil && d.Final.Validation != nil {
		v := d.Final.Validation
		w("Validation `%s` passed at seq %d (branch %s)", v.Validator, v.Seq, v.Branch)
		if v.Target != "" {
			w(" on %s", v.Target)
		}
		w(".\n\n")
		if len(v.Details) > 0 {
			w("```json\n%s\n```\n\n", oneLine(string(v.Details), 4000))
		}
	}
	if t := lastRun(calls, d.Final); t != nil {
		w("The last tool call before the close: `%s` %s (%s at %d), exit code %d:\n\n```\n%s```\n\n",
			t.Tool, oneLine(string(t.Arguments), 300), t.Branch, t.Seqs[len(t.Seqs)-1], t.ExitCode, ensureNewline(clip(orError(t), 4000)))
	} else if d.Final == nil {
		w("No accepted branch.\n\n")
	}

	w("## Sandboxes\n\n")
	sandboxes(w, d)

	w("## Memory\n\n")
	if len(d.Memory) == 0 {
		w("No memory events.\n\n")
	}
	for _, m := range d.Memory {
		w("- %s\n", memoryLine(m))
	}

	w("\n## Who acted\n\nAs the ledger authenticated each proposer (tenant/user) and stamped it on the event; a name an event claims for itself is shown as “claims”.\n\n")
	for _, b := range d.Branches {
		counts := make([]string, len(b.Actors))
		for i, a := range b.Actors {
			counts[i] = fmt.Sprintf("%s %d", a.Actor, a.Events)
		}
		tenant := ""
		if b.Tenant != "" {
			tenant = " (tenant " + b.Tenant + ")"
		}
		w("- %s%s: %s\n", b.ID, tenant, orDash(strings.Join(counts, ", ")))
	}
	if len(d.Acts) > 0 {
		w("\n")
	}
	for _, a := range d.Acts {
		w("- %s\n", actLine(a))
	}

	w("\n## Token usage\n\nEach model call counts once, in the branch that stored it (a fork's inherited events belong to its parent).\n\n")
	w("| | in | out | calls |\n|---|---|---|---|\n")
	w("| **whole tree** | %d | %d | %d |\n", d.Usage.Total.Total.In, d.Usage.Total.Total.Out, d.Usage.Total.Total.Calls)
	for _, k := range sortedKeys(d.Usage.Total.ByAgent) {
		t := d.Usage.Total.ByAgent[k]
		w("| agent %s | %d | %d | %d |\n", k, t.In, t.Out, t.Calls)
	}
	for _, k := range sortedKeys(d.Usage.Total.ByModel) {
		t := d.Usage.Total.ByModel[k]
		w("| model %s | %d | %d | %d |\n", k, t.In, t.Out, t.Calls)
	}
	for _, b := range d.Branches {
		t := d.Usage.ByBranch[b.ID].Total
		w("| branch %s | %d | %d | %d |\n", b.ID, t.In, t.Out, t.Calls)
	}
	if p := d.Usage.AcceptedPath; p != nil {
		w("\nOn the accepted path (the logical log of %s):\n\n| agent | in | out | calls |\n|---|---|---|---|\n", p.Branch)
		for _, k := range sortedKeys(p.Usage.ByAgent) {
			t := p.Usage.ByAgent[k]
			w("| %s | %d | %d | %d |\n", k, t.In, t.Out, t.Calls)
		}
		w("| **total** | %d | %d | %d |\n", p.Usage.Total.In, p.Usage.Total.Out, p.Usage.Total.Calls)
	}

	w("\n## Hash-chain heads\n\n| branch | own events | head seq | head hash |\n|---|---|---|---|\n")
	for _, b := range d.Branches {
		w("| %s | %d..%d (%d) | %d | `%s` |\n", b.ID, b.FirstSeq, b.Head.Seq, b.Events, b.Head.Seq, b.Head.Hash)
	}
	w("\nCheck this dossier offline: `rath verify --dossier <this directory>`.\n")
	return s.String()
}

func verdictText(b Branch) string {
	if b.VerdictReason == "" {
		return b.Verdict
	}
	return b.Verdict + ": " + b.VerdictReason
}

type storyLine struct {
	seq  uint64
	text string
}

// story lists a branch's own key events in sequence order.
func story(d *Dossier, b Branch) []storyLine {
	var out []storyLine
	add := func(seq uint64, format string, args ...any) {
		out = append(out, storyLine{seq, fmt.Sprintf("seq %d · ", seq) + fmt.Sprintf(format, args...)})
	}
	for _, t := range d.Turns {
		if t.Branch != b.ID {
			continue
		}
		if t.RequestedIn == nil {
			add(t.Seq, "turn %d requested: agent **%s** (rule %s)", t.Number, t.Agent, orDash(t.Rule))
		}
		switch t.Status {
		case TurnCompleted:
			line := fmt.Sprintf("turn %d completed: %s, %d tool call(s)", t.Number, t.Agent, t.ToolCalls)
			if t.Answer != "" {
				line += fmt.Sprintf(": “%s”", oneLine(t.Answer, 200))
			}
			add(t.EndSeq, "%s", line)
		case TurnFailed:
			add(t.EndSeq, "turn %d failed: %s: %s", t.Number, t.Agent, oneLine(t.Error, 200))
		}
	}
	for _, t := range d.ToolCalls {
		if t.Branch != b.ID {
			continue
		}
		line := fmt.Sprintf("tool call `%s` %s by %s, arguments `%s`", t.CallID, t.Tool, orDash(t.Agent), oneLine(string(t.Arguments), 160))
		switch t.Status {
		case ToolCompleted:
			line += fmt.Sprintf(" → exit %d", t.ExitCode)
			if len(t.Files) > 0 {
				line += ", changed " + strings.Join(t.Files, ", ")
			}
			if t.Result != "" {
				line += fmt.Sprintf(": “%s”", oneLine(t.Result, 120))
			}
		case ToolFailed:
			line += fmt.Sprintf(" → failed (exit %d): %s", t.ExitCode, oneLine(t.Error, 160))
		default:
			line += " → " + t.Status
		}
		if t.Sandbox != nil {
			line += fmt.Sprintf(" [sandbox %s/%s]", t.Sandbox.Backend, t.Sandbox.SandboxID)
		}
		add(t.Seqs[len(t.Seqs)-1], "%s", line)
	}
	for _, p := range d.Sandboxes {
		if p.Branch != b.ID {
			continue
		}
		what := "sandbox placed"
		if p.From != nil {
			what = fmt.Sprintf("sandbox moved from %s %s", p.From.Backend, p.From.SandboxID)
		}
		add(p.Seq, "%s: %s %s on %s, workspace %s at commit %s (%s); isolation: %s", what, p.Backend, p.SandboxID, orDash(p.Host), orDash(p.Workspace),
			short(p.Commit), orDash(p.Reason), isolationText(p))
	}
	for _, m := range d.Memory {
		if m.Branch == b.ID {
			add(m.Seq, "%s", strings.TrimPrefix(memoryLine(m), fmt.Sprintf("%s seq %d: ", m.Branch, m.Seq)))
		}
	}
	for _, v := range d.Validations {
		if v.Branch != b.ID {
			continue
		}
		if v.Passed {
			add(v.Seq, "validation **%s passed**", v.Validator)
		} else {
			add(v.Seq, "validation **%s failed**: %s", v.Validator, v.Reason)
		}
	}
	for _, dec := range d.Decisions {
		if dec.Branch == b.ID {
			add(dec.Seq, "selector: rule `%s` → route `%s`: %s", dec.Rule, dec.Route, orDash(dec.Reason))
		}
	}
	for _, m := range b.Merges {
		add(m.Seq, "merged %s up to %d (%d events): %s", m.Source, m.SourceHead.Seq, m.Events, orDash(m.Reason))
	}
	if b.ClosedSeq != 0 {
		add(b.ClosedSeq, "closed `%s`: %s", b.Outcome, orDash(b.CloseReason))
	}
	slices.SortStableFunc(out, func(a, b storyLine) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

func actLine(a Act) string {
	actor := orDash(a.Actor)
	if a.OnBehalf != "" {
		actor = fmt.Sprintf("%s (through %s)", a.OnBehalf, actor)
	}
	line := fmt.Sprintf("%s seq %d: %s %s", a.Branch, a.Seq, actor, a.What)
	if a.Detail != "" {
		line += ": " + oneLine(a.Detail, 160)
	}
	if a.By != "" {
		line += fmt.Sprintf(" (claims “%s”)", oneLine(a.By, 80))
	}
	return line
}

func memoryLine(m Memory) string {
	head := fmt.Sprintf("%s seq %d: ", m.Branch, m.Seq)
	switch m.Kind {
	case MemoryRecalled:
		items := make([]string, len(m.Items))
		for i, it := range m.Items {
			items[i] = fmt.Sprintf("%s v%d (score %.3g)", it.ItemID, it.Version, it.Score)
		}
		turn := ""
		if m.Turn > 0 {
			turn = fmt.Sprintf(" in turn %d", m.Turn)
		}
		return head + fmt.Sprintf("memory recalled by %s%s for “%s”: %s", orDash(m.Agent), turn, oneLine(m.Query, 120), orDash(strings.Join(items, ", ")))
	case MemoryWritten:
		prov := ""
		if p := m.Provenance; p != nil {
			prov = fmt.Sprintf("; provenance: session %s, events %s: %s", p.Session, orDash(strings.Join(p.EventIDs, ", ")), oneLine(p.Evidence, 160))
		}
		return head + fmt.Sprintf("memory written: %s v%d (%s): “%s”%s", m.ItemID, m.Version, orDash(m.Scope), oneLine(m.Content, 160), prov)
	default:
		return head + fmt.Sprintf("memory retracted: %s v%d by %s: %s", m.ItemID, m.Version, m.By, m.Reason)
	}
}

// acceptedCalls are the tool calls on the final branch's logical log, in
// sequence order.
func acceptedCalls(d *Dossier) []ToolCall {
	if d.Final == nil || d.tree == nil {
		return nil
	}
	var out []ToolCall
	for _, seg := range d.tree.path(d.Final.Branch) {
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
		if (t.Status == ToolCompleted || t.Status == ToolFailed) && t.Seqs[len(t.Seqs)-1] < f.Close.Seq {
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

func ensureNewline(s string) string {
	if s == "" || strings.HasSuffix(s, "\n") {
		return s
	}
	return s + "\n"
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

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// isolationText says what a placement isolated; a development backend is
// said to be one.
func isolationText(p Placement) string {
	switch {
	case p.Development:
		return fmt.Sprintf("**none**: %s is a development backend, commands ran as the tool runner's user on %s", p.Backend, orDash(p.Host))
	case p.Isolation == "":
		return "not recorded"
	}
	return p.Isolation
}

// sandboxes lists where each branch's tools ran and what that isolated,
// warning first when any ran on a development backend.
func sandboxes(w func(string, ...any), d *Dossier) {
	if len(d.Sandboxes) == 0 {
		w("No tool ran in a sandbox.\n\n")
		return
	}
	var dev []string
	for _, p := range d.Sandboxes {
		if p.Development && !slices.Contains(dev, p.Branch) {
			dev = append(dev, p.Branch)
		}
	}
	if len(dev) > 0 {
		w("**Not isolated:** branch %s ran tools on a development backend (local), which isolates nothing: its commands ran as the tool runner's user, with that user's access to the host's files and network.\n\n", strings.Join(dev, ", "))
	}
	w("| branch | seq | backend | sandbox | from | isolation |\n|---|---|---|---|---|---|\n")
	for _, p := range d.Sandboxes {
		from := "-"
		if p.From != nil {
			from = p.From.Backend + " " + p.From.SandboxID
		}
		w("| %s | %d | %s | %s | %s | %s |\n", p.Branch, p.Seq, p.Backend, p.SandboxID, from, cell(isolationText(p)))
	}
	w("\n")
}
