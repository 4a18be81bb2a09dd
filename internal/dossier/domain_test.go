package dossier

import (
	"encoding/json"
	"strings"
	"testing"

	dt "github.com/openrath/rath/internal/dossier/dossiertest"
	"github.com/openrath/rath/pkg/session"
)

func TestStateChanges(t *testing.T) {
	for _, tc := range []struct {
		name   string
		call   ToolCall
		change string
	}{
		{"recorded", ToolCall{Status: ToolCompleted, Result: `{"message":"ok","state_changes":[{"path":"/a","before":1,"after":2}]}`}, "/a 1 2"},
		{"failed call", ToolCall{Status: ToolFailed, Result: `{"state_changes":[{"path":"/a"}]}`}, ""},
		{"plain text", ToolCall{Status: ToolCompleted, Result: `exit code 0`}, ""},
		{"broken JSON", ToolCall{Status: ToolCompleted, Result: `{"state_changes":[{"path":`}, ""},
		{"wrong shape", ToolCall{Status: ToolCompleted, Result: `{"state_changes":"everything"}`}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, c := range StateChanges(tc.call) {
				got = append(got, c.Path+" "+string(c.Before)+" "+string(c.After))
			}
			if strings.Join(got, ";") != tc.change {
				t.Fatalf("changes %q, want %q", got, tc.change)
			}
		})
	}
}

// The section appears only for a graded domain task, and text from the
// events cannot break its tables.
func TestDomainSection(t *testing.T) {
	d := &Dossier{Root: "r", Branches: []Branch{{ID: "r", Name: "root"}}}
	if md := Markdown(d); strings.Contains(md, "The conversation, its state changes") {
		t.Fatal("a dossier without a domain task has the domain section")
	}
	d.Turns = []Turn{{At: At{Branch: "r", Seq: 3}, TurnID: "t1", Agent: "assistant", Status: TurnCompleted, Answer: "Done | really\nnext line"}}
	d.ToolCalls = []ToolCall{{At: At{Branch: "r", Seq: 5}, CallID: "c1", Tool: "cancel_order", Agent: "assistant", TurnID: "t1", Status: ToolCompleted, Seqs: []uint64{5, 7},
		Arguments: json.RawMessage(`{"order_id":"W|1"}`), Result: `{"message":"cancelled","state_changes":[{"path":"/orders/W|1/status","before":"pending","after":"cancelled"}]}`}}
	d.Validations = []Validation{{At: At{Branch: "r", Seq: 9}, Check: session.Check{Passed: false, Validator: "domain-state", Reason: "differs"},
		Details: json.RawMessage(`{"policy_decisions":[{"call_id":"c1","tool":"cancel_order","seq":5,"decision":"allowed"}],"differences":[{"text":"/x: expected 1, got 2"}]}`)}}
	md := []byte(Markdown(d))
	text := dt.Text(t, md)
	for _, want := range []string{"assistant: Done | really next line", "cancelled (1 state change)", "validation domain-state failed at seq 9: differs", "differs: /x: expected 1, got 2"} {
		if !strings.Contains(text, want) {
			t.Errorf("the section does not say %q:\n%s", want, md)
		}
	}
	var found int
	for _, tb := range dt.Tables(t, md) { // checks every row's cells
		if c := tb.Column("path"); c >= 0 && len(tb.Rows) == 1 && tb.Rows[0][c] == "/orders/W|1/status" {
			found++
		}
		if c := tb.Column("decision"); c >= 0 && len(tb.Rows) == 1 && tb.Rows[0][c] == "allowed" {
			found++
		}
	}
	if found != 2 {
		t.Fatalf("the state changes and policy tables are not whole:\n%s", md)
	}
}
