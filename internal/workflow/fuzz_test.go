package workflow_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"

	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/events"
)

// FuzzParse parses workflow files (YAML, with CEL expressions compiled as it
// parses): it never panics, a file it refuses is a *SpecError naming at
// least one problem, and a workflow it accepts evaluates its rules, stop
// conditions and budgets on real activations without panicking and reopens
// from its bundle as the same workflow. The seeds are the repository's
// workflow files; inputs a fuzzer once failed on are kept under
// testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	examples, err := filepath.Glob(filepath.Join("..", "..", "examples", "*", "*.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range append(files, examples...) {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, src := range []string{
		"", "name: x", "{", "- a\n- b", "name: [", "agents: {a: 1}",
		"name: w\nagents:\n  - {name: a, provider: scripted}\nrules:\n  - {name: r, when: 'state.turns > 1 && event.data.x == \"y\"', route: {agent: a}}\n",
		"name: w\nagents:\n  - {name: a, provider: scripted}\nrules:\n  - {name: r, when: 'size(state.decisions) >', route: {agent: a}}\n",
		"name: w\nagents:\n  - {name: a, provider: scripted}\nrules:\n  - {name: r, when: 'true', route: {fork: {at: 'event.seq - 1', agent: a, reason: r}}}\nstop:\n  - {name: s, when: 'state.tool_calls > 3', reason: too many}\nbudgets: {max_turns: 3, wall_time: 1m}\n",
		"a: &a [*a]", "name: &x w\ndescription: *x\n",
	} {
		f.Add([]byte(src))
	}
	evs := history(f,
		events.SessionStarted{Task: "fix the failing test"},
		events.ValidationFailed{Validator: "go test", Reason: "FAIL TestAdd", Details: []byte(`{"exit":1}`)},
	)
	st := fold(evs)
	var acts []map[string]any
	for _, e := range evs {
		act, err := workflow.Activation(st, e)
		if err != nil {
			f.Fatal(err)
		}
		acts = append(acts, act)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// A hang is a failure too: the fuzzer keeps the input of a
		// worker that dies, so die with every goroutine's stack.
		hung := time.AfterFunc(10*time.Second, func() { debug.SetTraceback("all"); panic(fmt.Sprintf("parse took 10 s: %q", data)) })
		defer hung.Stop()
		w, err := workflow.Parse(data, "fuzz.yaml")
		if err != nil {
			var se *workflow.SpecError
			if !errors.As(err, &se) || len(se.Problems) == 0 || err.Error() == "" {
				t.Fatalf("Parse's error is %T %q, not a *SpecError with its problems", err, err)
			}
			return
		}
		for _, act := range acts {
			_, _, _ = w.Decide(act)
			_, _, _ = w.DecideMemory(act)
			_, _, _, _ = w.Stopped(act)
			for _, r := range w.Rules {
				_, _ = w.MemoryContent(r.Name, act)
			}
		}
		_, _ = w.Exceeded(st, t0, t0.Add(time.Hour))
		for _, a := range w.Agents {
			if a.Script != "" {
				return // a bundle reads its scripts from disk
			}
		}
		b, err := workflow.NewBundle(w)
		if err != nil {
			t.Fatalf("bundle: %v", err)
		}
		raw, err := b.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		w2, _, err := workflow.OpenBundle(raw)
		if err != nil {
			t.Fatalf("reopen from its bundle: %v", err)
		}
		if w2.Hash() != w.Hash() || w2.Name != w.Name || len(w2.Rules) != len(w.Rules) || len(w2.Agents) != len(w.Agents) {
			t.Fatalf("reopened %s (%d rules) from %s (%d rules)", w2.Hash(), len(w2.Rules), w.Hash(), len(w.Rules))
		}
	})
}
