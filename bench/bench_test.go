package main

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestHarness runs the whole harness at a tiny scale. It starts a NATS
// server, builds and runs the ledger, so it only runs with RATH_BENCH=1:
//
//	RATH_BENCH=1 go test ./bench -run TestHarness -v
func TestHarness(t *testing.T) {
	if os.Getenv("RATH_BENCH") != "1" {
		t.Skip("set RATH_BENCH=1 to run the benchmark harness at scale 0.01")
	}
	cfg, err := parseFlags([]string{"--quick", "--scale", "0.01", "--timeout", "5m"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, cfg, &out, testLog{t}); err != nil {
		t.Fatalf("harness: %v\n%s", err, out.String())
	}
	table := out.String()
	t.Log("\n" + table)
	for _, id := range []string{"1d", "4", "4′"} {
		if !strings.Contains(table, "| "+id+" |") {
			t.Errorf("table has no row %s", id)
		}
	}
	if strings.Contains(table, "failed:") {
		t.Errorf("a section failed")
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		scale float64
		err   bool
	}{
		{args: nil, scale: 1},
		{args: []string{"--quick"}, scale: 0.1},
		{args: []string{"--quick", "--scale", "0.01"}, scale: 0.01},
		{args: []string{"--scale", "2"}, err: true},
		{args: []string{"--sections", "append,nope"}, err: true},
		{args: []string{"extra"}, err: true},
	} {
		cfg, err := parseFlags(tc.args)
		if tc.err {
			if err == nil {
				t.Errorf("parseFlags(%q): no error", tc.args)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseFlags(%q): %v", tc.args, err)
			continue
		}
		if cfg.scale != tc.scale {
			t.Errorf("parseFlags(%q): scale %g, want %g", tc.args, cfg.scale, tc.scale)
		}
	}
}

// An optional section runs only when named, after the default sections.
func TestGoAPIIsOptional(t *testing.T) {
	def, err := parseFlags(nil)
	if err != nil || def.has(sectionGoAPI) {
		t.Fatalf("default sections %v (%v) include %s", def.sections, err, sectionGoAPI)
	}
	cfg, err := parseFlags([]string{"--sections", "goapi,append"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{sectionAppend, sectionGoAPI}; !slices.Equal(cfg.sections, want) {
		t.Fatalf("sections %v, want %v", cfg.sections, want)
	}
}

func TestSizes(t *testing.T) {
	full, _ := parseFlags(nil)
	if full.pipeAppends() != 100_000 || full.memSessions() != 100_000 {
		t.Errorf("full scale: %d pipelined appends, %d sessions", full.pipeAppends(), full.memSessions())
	}
}

func TestShareInterleave(t *testing.T) {
	total := 0
	for i := range 7 {
		total += share(100, 7, i)
	}
	if total != 100 {
		t.Errorf("shares add up to %d, want 100", total)
	}
	got := interleave([][]rawMsg{{{id: "a1"}, {id: "a2"}}, {{id: "b1"}}})
	var ids []string
	for _, m := range got {
		ids = append(ids, m.id)
	}
	if want := []string{"a1", "b1", "a2"}; !slices.Equal(ids, want) {
		t.Errorf("interleave: %v, want %v", ids, want)
	}
}

func TestSealedChain(t *testing.T) {
	msgs, err := newPayloads(64).sealedChain("bench.test", "s1", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 3 || msgs[0].subject != "bench.test.s1.conversation" {
		t.Fatalf("sealed chain: %+v", msgs)
	}
	if !bytes.Contains(msgs[1].body, []byte(`"rathseq":2`)) || bytes.Contains(msgs[0].body, []byte(`"rathprev"`)) {
		t.Errorf("chain sequences or links wrong:\n%s\n%s", msgs[0].body, msgs[1].body)
	}
}

func TestLatencies(t *testing.T) {
	l := latencies{5, 1, 4, 2, 3}
	if l.median() != 3 || l.pct(0) != 1 || l.pct(100) != 5 {
		t.Errorf("median %v, min %v, max %v", l.median(), l.pct(0), l.pct(100))
	}
}

// The engine section (ADR 0038's O3, O5, O6) starts a `rath up` of its own
// and runs only when named.
func TestEngineIsOptional(t *testing.T) {
	def, err := parseFlags(nil)
	if err != nil || def.has(sectionEngine) {
		t.Fatalf("default sections %v (%v) include %s", def.sections, err, sectionEngine)
	}
	cfg, err := parseFlags([]string{"--quick", "--sections", "engine"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{sectionEngine}; !slices.Equal(cfg.sections, want) {
		t.Fatalf("sections %v, want %v", cfg.sections, want)
	}
	if n := cfg.n(1000, 20); n != 100 {
		t.Errorf("--quick: %d O3 sessions, want 100", n)
	}
}
