package events_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
)

var update = flag.Bool("update", false, "rewrite the golden wire files in testdata from the examples")

const (
	exampleSession = "01JDQ8ZK3V6ENS6Y9W4T2XH1AB"
	exampleFork    = "01JDQA4M7R0C2B9N5P8XK6TQWE"
	exampleHashA   = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	exampleHashB   = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"
	exampleHashC   = "fd61a03af4f77d870fc21e05e7e80678095c92d808cfb3b5c279ee04c74aca13"
)

// examples holds one value of every kind's data with every field set. The
// golden files are these values as they go on the wire.
var examples = map[string]any{
	events.TypeTurnRequested: events.TurnRequested{TurnID: "turn-7", Agent: "coder", Rule: "code-after-research", Reason: "research done"},
	events.TypeTurnCompleted: events.TurnCompleted{TurnID: "turn-7", Agent: "coder", StopReason: "tool_use", ToolCalls: 2},
	events.TypeTurnFailed:    events.TurnFailed{TurnID: "turn-7", Agent: "coder", Error: "anthropic: 529 overloaded after 5 attempts", Attempts: 5},
	events.TypeModelCallFailed: events.ModelCallFailed{TurnID: "turn-7", Agent: "coder", Provider: "openai", Model: "gpt-4.1",
		Attempt: 1, Status: 429, Error: "rate limited", RetryInMS: 500, RequestRef: "sha256:5d41402abc4b2a76b9719d911017c592ae1f2b6e5a4a1b1d9e2c3f4a5b6c7d8e"},
	events.TypeHandlerFailed: events.HandlerFailed{Handler: "tool-runner", EventID: "01JDQ9B2-call", EventType: events.TypeToolRequested,
		Attempts: 5, Error: "workspace unavailable", DeadLetter: "rath.dead.tool-runner"},
	events.TypeSessionStarted: events.SessionStarted{
		Workflow:     "fix-failing-test",
		WorkflowHash: "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
		WorkflowRef:  "sha256:fcde2b2edba56bf408601fb721fe9b5c338d10ee429ea04fae5511b68fbf8fb9",
		Task:         "Make TestParseConfig pass on main without changing its expectations.",
		Labels:       map[string]string{"repo": "openrath/rath", "requested_by": "ana"},
	},
	events.TypeSessionForked: events.SessionForked{
		Parent:     exampleSession,
		AtSeq:      42,
		ParentHash: exampleHashA,
		Reason:     "try a second fix strategy in parallel",
		Labels:     map[string]string{"strategy": "rewrite-parser"},
		// A counterfactual's fork runs a changed workflow (rath recheck).
		Workflow:     "fix-calc",
		WorkflowHash: "sha256:5d41402abc4b2a76b9719d911017c592ae1d4c0f3a8ecf9d6bd4b1f3c6f0e2a1",
		WorkflowRef:  "sha256:0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0",
	},
	events.TypeSessionMerged: events.SessionMerged{
		Source:     exampleFork,
		SourceHead: events.Position{Session: exampleFork, Seq: 57, Hash: exampleHashB},
		Ancestor:   &events.Position{Session: exampleSession, Seq: 42, Hash: exampleHashA},
		Segments:   []events.Segment{{Session: exampleFork, From: 43, To: 57}},
		Reason:     "the rewrite strategy passed validation",
	},
	events.TypeSessionPaused: events.SessionPaused{
		Reason: "waiting for a human to review the plan",
	},
	events.TypeSessionResumed: events.SessionResumed{
		Reason: "plan approved",
	},
	events.TypeSessionClosed: events.SessionClosed{
		Reason:  "task complete",
		Outcome: "succeeded",
	},
	events.TypeSessionArchived: events.SessionArchived{
		BundleRef:     "sha256:3b3a2f0e8f2a9c7d7c1c9e4f5b6a7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8",
		FromSeq:       1,
		HeadSeq:       58,
		HeadHash:      exampleHashC,
		HeadStreamSeq: 1207,
		Events:        58,
		Bytes:         91234,
		Reason:        "retention: closed for 7 days",
	},
	events.TypeSessionPurged: events.SessionPurged{
		BundleRef: "sha256:3b3a2f0e8f2a9c7d7c1c9e4f5b6a7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8",
		UpToSeq:   58,
		Events:    58,
		Reason:    "retention: archived for 30 days",
	},
	events.TypeChunkAppended: events.ChunkAppended{
		Role:       events.RoleTool,
		Agent:      "coder",
		Content:    "--- FAIL: TestParseConfig (0.00s)\n    config_test.go:31: want port 8080, got 0",
		ToolCallID: "call_01JDQ9B2",
		Correction: true,
	},
	events.TypeTranscriptCompacted: events.TranscriptCompacted{
		FromSeq:      3,
		ToSeq:        40,
		Summary:      "The agent located the failing test, read config.go and found that the port default is applied after parsing.",
		TokensBefore: 48213,
		TokensAfter:  6120,
	},
	events.TypeModelCalled: events.ModelCalled{
		Agent:       "coder",
		Provider:    "anthropic",
		Model:       "claude-sonnet-4-5",
		TokensIn:    12840,
		TokensOut:   932,
		LatencyMS:   4210,
		Attempt:     2,
		StopReason:  "tool_use",
		RequestRef:  "blob:sha256:3a6eb0790f39ac87c94f3856b2dd2c5d110e6811602261a9a923d3bb23adc8b7",
		ResponseRef: "blob:sha256:ef2d127de37b942baad06145e54b0c619a1f22327b2ebbcfbec78f5564afe39d",
		Choice:      &events.ScriptChoice{Turn: 3, Alternative: 1, Of: 2, Seed: "fix-add/2"},
	},
	events.TypeUsageRecorded: events.UsageRecorded{
		Agent:     "memory",
		Provider:  "openai",
		Model:     "text-embedding-3-small",
		TokensIn:  2048,
		TokensOut: 0,
	},
	events.TypeToolRequested: events.ToolRequested{
		CallID:     "call_01JDQ9B2",
		Tool:       "shell",
		Arguments:  json.RawMessage(`{"cmd":["go","test","./internal/config","-run","TestParseConfig"],"timeout_s":120}`),
		Agent:      "coder",
		ApprovalID: "ap-3f9c0d2e4b1a7c55",
		Runner:     events.RunnerCaller,
	},
	events.TypeToolStarted: events.ToolStarted{
		CallID:  "call_01JDQ9B2",
		Tool:    "shell",
		Attempt: 1,
		Sandbox: &events.Sandbox{Backend: "docker", SandboxID: "sbx-7f3a2c", Pool: "gpu"},
	},
	events.TypeToolCompleted: events.ToolCompleted{
		CallID:       "call_01JDQ9B2",
		Tool:         "shell",
		Attempt:      1,
		Result:       "ok  \tgithub.com/acme/app/internal/config\t0.012s",
		ResultRef:    "blob:sha256:b5bb9d8014a0f9b1d61e21e796d78dccdf1352f23cd32812f4850b878ae4944c",
		ExitCode:     0,
		DurationMS:   1834,
		Diff:         "--- a/internal/config/config.go\n+++ b/internal/config/config.go\n@@ -12 +12 @@\n-\tcfg.Port = 0\n+\tcfg.Port = 8080\n",
		DiffRef:      "blob:sha256:7d865e959b2466918c9863afca942d0fb89d7c9ac0c99bafc3749504ded97730",
		CommitBefore: "4f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39",
		CommitAfter:  "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678",
		Sandbox:      &events.Sandbox{Backend: "docker", SandboxID: "sbx-7f3a2c", Pool: "gpu"},
		Limits:       "timeout=2m0s cpu=600s nofile=4096 fsize=1073741824B nproc=256 as=8589934592B call-memory=4294967296B call-processes=1024 call-cpu=30m0s (the call's processes together, cgroup v1 rath-calls/812-3) seccomp=48-calls-denied",
		Correction:   true,
	},
	events.TypeToolFailed: events.ToolFailed{
		CallID:     "call_01JDQ9C7",
		Tool:       "shell",
		Attempt:    3,
		Error:      "command timed out after 120s",
		ExitCode:   137,
		DurationMS: 120004,
		Sandbox:    &events.Sandbox{Backend: "docker", SandboxID: "sbx-7f3a2c", Pool: "gpu"},
	},
	events.TypeToolCleared: events.ToolCleared{
		CallID: "call_01JDQ9D1",
		Tool:   "run",
	},
	events.TypeSandboxPlaced: events.SandboxPlaced{
		Backend:   events.BackendBwrap,
		SandboxID: "bwrap-" + exampleSession,
		Host:      "runner-eu-3",
		Workspace: "/var/lib/rath/workspaces/.bwrap/" + exampleSession,
		Commit:    "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
		Reason:    "moved from local (local-" + exampleSession + ") of pool edge at commit 4b825dc642cb: isolate before running the tests",
		Isolation: "bwrap: new user, mount, pid, ipc, uts, cgroup and network namespaces (no network); read-only system; writable: the workspace (its .git read-only); uid 1000 inside, host uid 204711 (tenant acme); nproc 256, /tmp 256 MiB",
		From:      &events.Sandbox{Backend: events.BackendLocal, SandboxID: "local-" + exampleSession, Pool: "edge"},
		Pool:      "gpu",
		Runner:    "gpu/runner-eu-3:/var/lib/rath/workspaces/.bwrap",
	},
	events.TypeSandboxRequested: events.SandboxRequested{
		Backend: events.BackendBwrap,
		Pool:    "gpu",
		Reason:  "isolate before running the tests",
	},
	events.TypeSandboxRefused: events.SandboxRefused{
		Backend: events.BackendBwrap,
		Reason:  "backend bwrap does not work on this tool runner: bubblewrap (bwrap) not found",
	},
	events.TypeMemoryRecalled: events.MemoryRecalled{
		Query:  "how are config defaults applied in acme/app",
		Agent:  "coder",
		TurnID: "turn_01JDQ9A0",
		Scope:  "project",
		Scopes: []string{"project:acme/app", "agent:coder"},
		Tags:   []string{"config"},
		Items: []events.MemoryItemRef{
			{ItemID: "mem_01JC2K8V", Version: 3, Score: 0.87, Content: "Config defaults are applied in config.Load, before flags."},
			{ItemID: "mem_01JC7P1D", Version: 1, Score: 0.64, Content: "Failure pattern: TestParseConfig fails when defaults are applied twice."},
		},
	},
	events.TypeMemoryWritten: events.MemoryWritten{
		ItemID:  "mem_01JDQB5F",
		Version: 3,
		Content: "In acme/app, config defaults must be applied before flag parsing, or flags are overwritten.",
		Tags:    []string{"config", "go"},
		Scope:   "project:acme/app",
		Provenance: events.Provenance{
			Session:  exampleSession,
			EventIDs: []string{"0193a7c4-5e2b-7c1d-9f3e-2a4b6c8d0e1f", "0193a7c5-1a2b-7c3d-8e4f-5a6b7c8d9e0f"},
			Evidence: "tool_result",
		},
		RestoredFrom: 2,
	},
	events.TypeMemoryRetracted: events.MemoryRetracted{
		ItemID:  "mem_01JC7P1D",
		Version: 1,
		By:      "ana",
		Reason:  "outdated since the config package was rewritten",
	},
	events.TypeSelectorDecided: events.SelectorDecided{
		Rule:       "code-after-research",
		Inputs:     json.RawMessage(`{"event.type":"rath.agent.turn.completed","state.turns":1}`),
		Candidates: []string{"code-after-research", "fallback"},
		Route:      "agent:coder",
		Reason:     "research is done; the coder takes over",
		Agent:      "coder",
		TurnID:     "turn-7",
		Router:     "triage",
	},
	events.TypeWorkPending: events.WorkPending{
		WorkID:      "work_01JDQ9D4",
		Kind:        "review",
		Description: "review the config default fix before merge",
		Assignee:    "ana",
	},
	events.TypeWorkDone: events.WorkDone{
		WorkID:  "work_01JDQ9D4",
		Outcome: "approved",
	},
	events.TypeValidationPassed: events.ValidationPassed{
		Validator: "go-test",
		Target:    "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678",
		Details:   json.RawMessage(`{"packages":14,"passed":212,"skipped":3}`),
	},
	events.TypeValidationFailed: events.ValidationFailed{
		Validator: "golangci-lint",
		Target:    "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678",
		Reason:    "2 issues found",
		Details:   json.RawMessage(`{"issues":[{"file":"internal/config/config.go","line":14,"linter":"errcheck"}]}`),
	},
	events.TypeExperimentRecorded: events.ExperimentRecorded{
		Name:     "poly5",
		CallID:   "call_01JDQ9C4",
		Agent:    "experimenter",
		Command:  []string{"go", "run", ".", "-degree", "5", "-lr", "0.5"},
		Config:   json.RawMessage(`{"degree":5,"epochs":4000,"l2":0,"learning_rate":0.5}`),
		Metrics:  map[string]float64{"train_rmse": 0.118, "val_r2": 0.974, "val_rmse": 0.121},
		ExitCode: 0,
		Commit:   "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678",
		Problem:  "metric \"note\" is not a number: left out",
	},
	events.TypeApprovalRequested: events.ApprovalRequested{
		ApprovalID: "appr_01JDQ9E8",
		Action:     "push branch fix/config-defaults to origin",
		Approver:   "ana",
		CallID:     "call_01JDQ9B2",
		Tool:       "run",
		Gate:       "push-needs-approval",
		Deadline:   "2026-01-05T10:00:00Z",
		OnTimeout:  events.TimeoutEscalate, EscalateTo: "leads",
		EscalateDeadline: "2026-01-05T11:00:00Z",
	},
	events.TypeApprovalExpired: events.ApprovalExpired{
		ApprovalID:   "appr_01JDQ9E8",
		Deadline:     "2026-01-05T10:00:00Z",
		OnTimeout:    events.TimeoutEscalate,
		Approver:     "maintainers",
		EscalatedTo:  "leads",
		NextDeadline: "2026-01-05T11:00:00Z",
	},
	events.TypeApprovalGranted: events.ApprovalGranted{
		ApprovalID: "appr_01JDQ9E8",
		By:         "ana",
		Comment:    "looks good",
	},
	events.TypeApprovalRejected: events.ApprovalRejected{
		ApprovalID: "appr_01JDQ9F2",
		By:         "ana",
		Reason:     "do not force-push to main",
	},
}

func goldenPath(k events.Kind) string { return filepath.Join("testdata", k.Schema) }

func marshalGolden(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// TestGolden pins the wire format of every kind's data: renaming a JSON tag,
// changing a field's type or dropping a field fails here. Run
// `go test ./pkg/events -update` after adding a kind or a field on purpose.
func TestGolden(t *testing.T) {
	for _, k := range events.Kinds() {
		t.Run(k.Type, func(t *testing.T) {
			ex, ok := examples[k.Type]
			if !ok {
				t.Fatalf("no example for %s", k.Type)
			}
			want := marshalGolden(t, ex)
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(goldenPath(k), want, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			golden, err := os.ReadFile(goldenPath(k))
			if err != nil {
				t.Fatalf("%v (run go test ./pkg/events -update)", err)
			}
			if !bytes.Equal(golden, want) {
				t.Errorf("example marshals differently from %s:\ngot:\n%s\nwant:\n%s", goldenPath(k), want, golden)
			}
			v, err := events.DecodeData(k.Type, golden)
			if err != nil {
				t.Fatal(err)
			}
			if again := marshalGolden(t, v); !bytes.Equal(again, golden) {
				t.Errorf("%s does not survive decode and re-encode:\ngot:\n%s\nwant:\n%s", goldenPath(k), again, golden)
			}
		})
	}
}

// TestOldVersionsDecode keeps the wire forms of earlier versions of a
// kind's data readable: testdata/old holds them, named like the golden
// files, and each must still decode and re-encode to the same JSON (its
// absent optional fields stay absent).
func TestOldVersionsDecode(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "old", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no old wire forms in testdata/old: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			var kind events.Kind
			for _, k := range events.Kinds() {
				if k.Schema == filepath.Base(file) {
					kind = k
				}
			}
			if kind.Type == "" {
				t.Fatalf("%s names no registered kind", file)
			}
			old, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			v, err := events.DecodeData(kind.Type, old)
			if err != nil {
				t.Fatal(err)
			}
			if again := marshalGolden(t, v); !bytes.Equal(again, old) {
				t.Errorf("%s does not survive decode and re-encode:\ngot:\n%s\nwant:\n%s", file, again, old)
			}
		})
	}
}

// TestGoldenExamplesFilled keeps the golden files complete: an omitempty
// field left at its zero value would be missing from the wire form and escape
// the check.
func TestGoldenExamplesFilled(t *testing.T) {
	for typ, ex := range examples {
		if _, ok := events.Lookup(typ); !ok {
			t.Errorf("example for unregistered type %s", typ)
		}
		for _, f := range omittedFields(reflect.ValueOf(ex), "") {
			t.Errorf("example for %s leaves omitempty field %s empty", typ, f)
		}
	}
}

// omittedFields lists the omitempty fields of a struct value, at any depth,
// that encoding/json would leave out.
func omittedFields(v reflect.Value, at string) []string {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return omittedFields(v.Elem(), at)
	case reflect.Slice:
		var out []string
		for i := range v.Len() {
			out = append(out, omittedFields(v.Index(i), fmt.Sprintf("%s[%d]", at, i))...)
		}
		return out
	case reflect.Struct:
		var out []string
		for i := range v.NumField() {
			f, fv := v.Type().Field(i), v.Field(i)
			name := at + "." + f.Name
			if strings.Contains(f.Tag.Get("json"), ",omitempty") && (fv.IsZero() || (fv.Kind() == reflect.Slice || fv.Kind() == reflect.Map) && fv.Len() == 0) {
				out = append(out, name)
				continue
			}
			out = append(out, omittedFields(fv, name)...)
		}
		return out
	}
	return nil
}
