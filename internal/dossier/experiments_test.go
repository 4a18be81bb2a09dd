package dossier

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	dt "github.com/openrath/rath/internal/dossier/dossiertest"
	"github.com/openrath/rath/pkg/events"
)

func xp(branch string, seq uint64, name string, exit int, metrics map[string]float64) Experiment {
	x := Experiment{At: At{Branch: branch, Seq: seq, EventID: fmt.Sprintf("ev-%s-%d", branch, seq)},
		ExperimentRecorded: events.ExperimentRecorded{Name: name, CallID: "c" + name, Agent: "experimenter", ExitCode: exit, Metrics: metrics,
			Config: json.RawMessage(`{"degree":2}`), Commit: "0123456789abcdef0123456789abcdef01234567"}}
	x.OK = exit == 0 && len(metrics) > 0
	return x
}

// The objective is the metric the most successful experiments report among
// those whose name says which way is better, a validation one first; the
// best experiment is the earliest of the best.
func TestObjectiveAndBest(t *testing.T) {
	for _, tc := range []struct {
		name string
		xs   []Experiment
		want Objective
		ok   bool
		best int
	}{
		{"none", nil, Objective{}, false, -1},
		{"no direction", []Experiment{xp("r", 1, "a", 0, map[string]float64{"epochs": 3})}, Objective{}, false, -1},
		{"validation before training", []Experiment{
			xp("r", 1, "a", 0, map[string]float64{"train_rmse": 0.1, "val_r2": 0.5}),
			xp("r", 2, "b", 0, map[string]float64{"train_rmse": 0.3, "val_r2": 0.9}),
			xp("r", 3, "c", 0, map[string]float64{"train_rmse": 0.2, "val_r2": 0.9}),
		}, Objective{"val_r2", true}, true, 1},
		{"lower is better, failed ones ignored", []Experiment{
			xp("r", 1, "a", 1, map[string]float64{"loss": 0.01}),
			xp("r", 2, "b", 0, map[string]float64{"loss": 0.5}),
			xp("r", 3, "c", 0, map[string]float64{"loss": 0.4}),
		}, Objective{"loss", false}, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ObjectiveOf(tc.xs)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("ObjectiveOf = %v %v, want %v %v", got, ok, tc.want, tc.ok)
			}
			if ok {
				if b := Best(tc.xs, got); b != tc.best {
					t.Errorf("Best = %d, want %d", b, tc.best)
				}
			}
		})
	}
}

// The plot is well-formed XML whatever the names hold, and says which
// experiment is best; the section's tables keep their columns.
func TestExperimentsPlotAndSection(t *testing.T) {
	hostile := "</text><script>alert(1)</script>\x01\xff|`*"
	d := &Dossier{
		Branches: []Branch{{ID: "r", Name: "root"}, {ID: "f", Name: "fork-1@9"}},
		Experiments: []Experiment{
			xp("r", 5, hostile, 0, map[string]float64{"val_r2": 0.6}),
			xp("r", 9, "wild", 1, map[string]float64{"diverged": 1}),
			xp("f", 12, "good", 0, map[string]float64{"val_r2": 0.98}),
		},
		Memory: []Memory{
			{At: At{Branch: "r", Seq: 7}, Kind: MemoryWritten, ItemID: "mem-1", Version: 1, Provenance: &events.Provenance{EventIDs: []string{"ev-r-5"}}},
			{At: At{Branch: "f", Seq: 11}, Kind: MemoryRecalled, Items: []events.MemoryItemRef{{ItemID: "mem-1", Version: 1}}},
		},
	}
	svg := ExperimentsSVG(d)
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("experiments.svg is not well-formed: %v\n%s", err, svg)
		}
	}
	if strings.Contains(svg, "<script") || !strings.Contains(svg, "<title>best: good</title>") || !strings.Contains(svg, "val_r2 over the experiments (higher is better)") {
		t.Errorf("experiments.svg:\n%s", svg)
	}
	var b strings.Builder
	experimentsSection(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, d, newNamer(d))
	md := b.String()
	tables := dt.Tables(t, []byte(md))
	if len(tables) != 2 || len(tables[0].Rows) != 3 || len(tables[1].Rows) != 1 {
		t.Fatalf("tables:\n%s", md)
	}
	if row := tables[1].Rows[0]; row[2] != "root at 7" || row[3] != "fork-1@9 at 11" {
		t.Errorf("memory edge %q", row)
	}
	if mem := tables[0].Rows[0][tables[0].Column("memory")]; mem != "mem-1 v1" {
		t.Errorf("the failed experiment's memory cell is %q", mem)
	}
	if !strings.Contains(md, "**Best configuration**: good on branch fork-1@9 at 12") {
		t.Errorf("no best configuration:\n%s", md)
	}
	if ExperimentsSVG(&Dossier{}) != "" {
		t.Error("a plot without experiments")
	}
}
