package events

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Summarizer is an event's data that can say in one short line what it
// holds. Every registered kind's data implements it (register requires it),
// so a new kind cannot be added without its line. The methods' comments
// show each line's shape; a part whose data is empty is left out.
type Summarizer interface {
	Summarize() string
}

// Summary says in one short line what an event holds, for people: rath log
// and rath watch print it after the sequence, time and type, the demo after
// the branch and sequence, rath diff after the type. It is the one place
// that words an event kind for a printer; printers add their own columns
// around it. Data that does not decode is shown clipped as it is.
func Summary(ev Stored) string {
	d, err := ev.Decode()
	if err != nil {
		return Clip(string(ev.Data), clipWidth)
	}
	return d.(Summarizer).Summarize() // every registered kind's data is a Summarizer
}

// clipWidth is how many characters of free text (content, reasons,
// arguments) a summary shows.
const clipWidth = 60

// Clip puts s on one line (runs of white space become one space) and cuts
// it to at most n characters, the last being "…" when it was cut.
func Clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// short is a target as a person reads it: a commit or content hash (40 or
// 64 hex digits) by its first 12, as git abbreviates one; other text clipped.
func short(target string) string {
	if (len(target) == 40 || len(target) == 64) && strings.Trim(target, "0123456789abcdef") == "" {
		return target[:12]
	}
	return Clip(target, 40)
}

// line builds a summary: a head, then optional parts.
type line struct{ strings.Builder }

func newLine(format string, args ...any) *line {
	l := &line{}
	fmt.Fprintf(l, format, args...)
	return l
}

// add appends text when v is not empty: format holds one %s for v.
func (l *line) add(format, v string) *line {
	if v != "" {
		fmt.Fprintf(l, format, v)
	}
	return l
}

// text appends free text after ": ", clipped, when there is any.
func (l *line) text(v string) *line { return l.add(": %s", Clip(v, clipWidth)) }

func count[N int | int64 | uint64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprint(n) + " " + many
}

func labels(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, " ")
}

// Summarize is "session started: workflow W, task “…”, labels k=v".
func (d SessionStarted) Summarize() string {
	var parts []string
	if d.Workflow != "" {
		parts = append(parts, "workflow "+d.Workflow)
	}
	if d.Task != "" {
		parts = append(parts, "task “"+Clip(d.Task, clipWidth)+"”")
	}
	if len(d.Labels) > 0 {
		parts = append(parts, "labels "+labels(d.Labels))
	}
	return newLine("session started").add(": %s", strings.Join(parts, ", ")).String()
}

// Summarize is "fork of PARENT at SEQ: reason".
func (d SessionForked) Summarize() string {
	return newLine("fork of %s at %d", d.Parent, d.AtSeq).text(d.Reason).String()
}

// Summarize is "merged SOURCE up to SEQ (N events): reason".
func (d SessionMerged) Summarize() string {
	n := uint64(0)
	for _, s := range d.Segments {
		n += s.To - s.From + 1
	}
	return newLine("merged %s up to %d (%s)", d.Source, d.SourceHead.Seq, count(n, "event", "events")).text(d.Reason).String()
}

// Summarize is "paused: reason".
func (d SessionPaused) Summarize() string { return newLine("paused").text(d.Reason).String() }

// Summarize is "resumed: reason".
func (d SessionResumed) Summarize() string { return newLine("resumed").text(d.Reason).String() }

// Summarize is "closed: outcome (reason)".
func (d SessionClosed) Summarize() string {
	return newLine("closed").add(": %s", d.Outcome).add(" (%s)", Clip(d.Reason, clipWidth)).String()
}

// Summarize is "archived events FROM..HEAD (N events, B bytes) in REF: reason".
func (d SessionArchived) Summarize() string {
	return newLine("archived events %d..%d (%s, %d bytes) in %s", d.FromSeq, d.HeadSeq, count(d.Events, "event", "events"), d.Bytes, d.BundleRef).
		text(d.Reason).String()
}

// Summarize is "purged events up to SEQ (N events), kept in REF: reason".
func (d SessionPurged) Summarize() string {
	return newLine("purged events up to %d (%s), kept in %s", d.UpToSeq, count(d.Events, "event", "events"), d.BundleRef).text(d.Reason).String()
}

// Summarize is "role/agent (correction): content".
func (d ChunkAppended) Summarize() string {
	who := d.Role
	if d.Agent != "" {
		who += "/" + d.Agent
	}
	if d.Correction {
		who += " (correction)"
	}
	return who + ": " + Clip(d.Content, clipWidth)
}

// Summarize is "compacted FROM..TO, tokens BEFORE → AFTER: summary".
func (d TranscriptCompacted) Summarize() string {
	return newLine("compacted %d..%d, tokens %d → %d", d.FromSeq, d.ToSeq, d.TokensBefore, d.TokensAfter).text(d.Summary).String()
}

// Summarize is "agent on provider/model: IN tokens in, OUT out, MS ms, stop
// reason", and for a scripted choose turn ", drew 3b of 2 matching (seed S)":
// the turn's index in the script and the alternative's letter.
func (d ModelCalled) Summarize() string {
	l := newLine("%s on %s/%s: %d tokens in, %d out, %d ms", d.Agent, d.Provider, d.Model, d.TokensIn, d.TokensOut, d.LatencyMS)
	if d.Attempt > 1 {
		fmt.Fprintf(l, ", attempt %d", d.Attempt)
	}
	l.add(", stop %s", d.StopReason)
	if c := d.Choice; c != nil {
		// Alternatives are named by letter, as scripted tool call IDs
		// name them (call_<agent>_<turn><letter>_<i>).
		fmt.Fprintf(l, ", drew %d%s of %d matching (seed %q)", c.Turn, altLetter(c.Alternative), c.Of, c.Seed)
	}
	return l.String()
}

func altLetter(i int) string {
	if i >= 0 && i < 26 {
		return string(rune('a' + i))
	}
	return fmt.Sprintf("#%d", i)
}

// Summarize is "usage of agent on provider/model: IN tokens in, OUT out".
func (d UsageRecorded) Summarize() string {
	return fmt.Sprintf("usage of %s on %s/%s: %d tokens in, %d out", d.Agent, d.Provider, d.Model, d.TokensIn, d.TokensOut)
}

// Summarize is "agent on provider/model failed, attempt N, status S, retry in MS ms: error".
func (d ModelCallFailed) Summarize() string {
	l := newLine("%s on %s/%s failed, attempt %d", d.Agent, d.Provider, d.Model, d.Attempt)
	if d.Status != 0 {
		fmt.Fprintf(l, ", status %d", d.Status)
	}
	if d.RetryInMS != 0 {
		fmt.Fprintf(l, ", retry in %d ms", d.RetryInMS)
	}
	return l.text(d.Error).String()
}

// Summarize is "agent calls tool CALL arguments".
func (d ToolRequested) Summarize() string {
	l := newLine("calls").add(" %s", d.Tool).add(" %s", d.CallID).add(" %s", Clip(string(d.Arguments), clipWidth)).add(", waits for approval %s", d.ApprovalID).add(", run by the %s", d.Runner)
	if d.Agent == "" {
		return l.String()
	}
	return d.Agent + " " + l.String()
}

// Summarize is "tool CALL cleared: no gate holds it".
func (d ToolCleared) Summarize() string {
	return newLine("%s %s cleared: no gate holds it", d.Tool, d.CallID).String()
}

// Summarize is "tool CALL started, attempt N, in [pool/]backend/sandbox".
func (d ToolStarted) Summarize() string {
	l := newLine("%s %s started, attempt %d", d.Tool, d.CallID, d.Attempt)
	if d.Sandbox != nil {
		l.WriteString(", in ")
		if d.Sandbox.Pool != "" {
			fmt.Fprintf(l, "%s/", d.Sandbox.Pool)
		}
		fmt.Fprintf(l, "%s/%s", d.Sandbox.Backend, d.Sandbox.SandboxID)
	}
	return l.String()
}

// Summarize is "tool CALL exit CODE, MS ms: result", or "…, provided by a
// person: result" for a correction.
func (d ToolCompleted) Summarize() string {
	if d.Correction {
		return newLine("%s %s exit %d, provided by a person", d.Tool, d.CallID, d.ExitCode).text(d.Result).String()
	}
	return newLine("%s %s exit %d, %d ms", d.Tool, d.CallID, d.ExitCode, d.DurationMS).text(d.Result).String()
}

// Summarize is "tool CALL failed, exit CODE: error".
func (d ToolFailed) Summarize() string {
	l := newLine("%s %s failed", d.Tool, d.CallID)
	if d.ExitCode != 0 {
		fmt.Fprintf(l, ", exit %d", d.ExitCode)
	}
	return l.text(d.Error).String()
}

// Summarize is "sandbox backend/ID (isolation: …), moved from backend/ID, host H: reason";
// with pools, "sandbox pool/backend/ID … moved from pool/backend/ID, host H, runner R: reason".
func (d SandboxPlaced) Summarize() string {
	pooled := d.Pool != "" || d.From != nil && d.From.Pool != ""
	in := func(pool string) string {
		if pooled {
			return PoolOf(pool) + "/"
		}
		return ""
	}
	l := newLine("sandbox %s%s/%s", in(d.Pool), d.Backend, d.SandboxID)
	if Development(d.Backend) {
		l.WriteString(" (development backend: no isolation)")
	} else {
		l.add(" (isolation: %s)", Clip(d.IsolationOf(), clipWidth))
	}
	if d.From != nil {
		fmt.Fprintf(l, ", moved from %s%s/%s", in(d.From.Pool), d.From.Backend, d.From.SandboxID)
	}
	l.add(", host %s", d.Host)
	if pooled {
		l.add(", runner %s", d.Runner)
	}
	return l.text(d.Reason).String()
}

// Summarize is "move to sandbox [POOL/]BACKEND requested: reason".
func (d SandboxRequested) Summarize() string {
	to := d.Backend
	if d.Pool != "" {
		to = d.Pool + "/" + d.Backend
	}
	return newLine("move to sandbox %s requested", to).text(d.Reason).String()
}

// Summarize is "move to sandbox BACKEND refused: reason".
func (d SandboxRefused) Summarize() string {
	return newLine("move to sandbox %s refused", d.Backend).text(d.Reason).String()
}

// Summarize is "memory recalled for agent: N items".
func (d MemoryRecalled) Summarize() string {
	return newLine("memory recalled").add(" for %s", d.Agent).add(": %s", count(len(d.Items), "item", "items")).String()
}

// Summarize is "memory written: ITEM vN in scope (evidence): content".
func (d MemoryWritten) Summarize() string {
	return newLine("memory written: %s v%d", d.ItemID, d.Version).add(" in %s", d.Scope).add(" (%s)", d.Provenance.Evidence).
		text(d.Content).String()
}

// Summarize is "memory retracted: ITEM vN by B: reason".
func (d MemoryRetracted) Summarize() string {
	l := newLine("memory retracted: %s", d.ItemID)
	if d.Version != 0 {
		fmt.Fprintf(l, " v%d", d.Version)
	}
	return l.add(" by %s", d.By).text(d.Reason).String()
}

// Summarize is "selector: rule → route (router NAME): reason".
func (d SelectorDecided) Summarize() string {
	return newLine("selector: %s → %s", d.Rule, d.Route).add(" (router %s)", d.Router).text(d.Reason).String()
}

// Summarize is "work pending: ID kind for assignee: description".
func (d WorkPending) Summarize() string {
	return newLine("work pending: %s %s", d.WorkID, d.Kind).add(" for %s", d.Assignee).text(d.Description).String()
}

// Summarize is "work done: ID: outcome".
func (d WorkDone) Summarize() string {
	return newLine("work done: %s", d.WorkID).text(d.Outcome).String()
}

// Summarize is "validation passed: validator (target T)".
func (d ValidationPassed) Summarize() string {
	return newLine("validation passed: %s", d.Validator).add(" (target %s)", short(d.Target)).String()
}

// Summarize is "validation FAILED: validator (target T): reason", in
// capitals: it is the line a reader of a run looks for.
func (d ValidationFailed) Summarize() string {
	return newLine("validation FAILED: %s", d.Validator).add(" (target %s)", short(d.Target)).text(d.Reason).String()
}

// Summarize is "experiment NAME: metric=value …", or "experiment NAME
// FAILED (exit N): problem" when the command failed or reported nothing.
func (d ExperimentRecorded) Summarize() string {
	name := Clip(d.Name, 60)
	l := newLine("experiment %s", name)
	if d.ExitCode != 0 || len(d.Metrics) == 0 {
		l = newLine("experiment %s FAILED", name).add(" (exit %s)", strconv.Itoa(d.ExitCode))
	}
	l.add(": %s", MetricsText(d.Metrics))
	return l.text(d.Problem).String()
}

// MetricsText is metrics as "name=value" pairs, by name, values in %g.
func MetricsText(m map[string]float64) string {
	names := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + "=" + strconv.FormatFloat(m[n], 'g', 4, 64)
	}
	return strings.Join(parts, " ")
}

// Summarize is "approval ID requested of approver for call C (tool), until
// deadline: action".
func (d ApprovalRequested) Summarize() string {
	l := newLine("approval %s requested", d.ApprovalID).add(" of %s", d.Approver).add(" for call %s", d.CallID).add(" (%s)", d.Tool)
	l.add(", until %s", d.Deadline).add(" then %s", d.OnTimeout)
	return l.text(d.Action).String()
}

// Summarize is "approval ID of approver expired at deadline: on_timeout" (and
// the escalation's role and deadline).
func (d ApprovalExpired) Summarize() string {
	l := newLine("approval %s", d.ApprovalID).add(" of %s", d.Approver)
	fmt.Fprintf(l, " expired at %s: %s", d.Deadline, d.OnTimeout)
	return l.add(" to %s", d.EscalatedTo).add(" until %s", d.NextDeadline).String()
}

// Summarize is "approval ID granted by B: comment".
func (d ApprovalGranted) Summarize() string {
	return newLine("approval %s granted", d.ApprovalID).add(" by %s", d.By).text(d.Comment).String()
}

// Summarize is "approval ID rejected by B: reason".
func (d ApprovalRejected) Summarize() string {
	return newLine("approval %s rejected", d.ApprovalID).add(" by %s", d.By).text(d.Reason).String()
}

// Summarize is "turn of agent (TURN, rule R)".
func (d TurnRequested) Summarize() string {
	l := newLine("turn of %s (%s", d.Agent, d.TurnID).add(", rule %s", d.Rule)
	l.WriteString(")")
	return l.String()
}

// Summarize is "turn of agent completed (TURN): N tool calls, stop reason".
func (d TurnCompleted) Summarize() string {
	return newLine("turn of %s completed (%s): %s", d.Agent, d.TurnID, count(d.ToolCalls, "tool call", "tool calls")).
		add(", stop %s", d.StopReason).String()
}

// Summarize is "turn of agent failed (TURN) after N attempts: error".
func (d TurnFailed) Summarize() string {
	l := newLine("turn of %s failed (%s)", d.Agent, d.TurnID)
	if d.Attempts > 0 {
		fmt.Fprintf(l, " after %s", count(d.Attempts, "attempt", "attempts"))
	}
	return l.text(d.Error).String()
}

// Summarize is "handler gave up on EVENT (type) after N attempts: error".
func (d HandlerFailed) Summarize() string {
	return newLine("%s gave up on %s (%s) after %s", d.Handler, d.EventID, d.EventType, count(d.Attempts, "attempt", "attempts")).
		text(d.Error).String()
}
