package routerapi_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/routerapi"
)

// A router's name is one subject token a workflow can write: no dot, no
// wildcard, no empty name.
func TestValidateName(t *testing.T) {
	for _, ok := range []string{"triage", "Triage_2", "_x", strings.Repeat("a", 64)} {
		if err := routerapi.ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "2fast", "tri.age", "tri*", "a>", "tri-age", "a b", strings.Repeat("a", 65)} {
		if err := routerapi.ValidateName(bad); !errors.Is(err, routerapi.ErrBadName) {
			t.Errorf("ValidateName(%q) = %v, want ErrBadName", bad, err)
		}
	}
}

// The subjects and the queue group are part of the contract: programs in
// other languages subscribe to them by name.
func TestSubjects(t *testing.T) {
	if got := routerapi.Subject("default", "triage"); got != "rath.route.default.triage" {
		t.Errorf("Subject = %s", got)
	}
	if got := routerapi.Filter("triage"); got != "rath.route.*.triage" {
		t.Errorf("Filter = %s", got)
	}
	if got := routerapi.Queue("triage"); got != "router-triage" {
		t.Errorf("Queue = %s", got)
	}
}

// Kind names the one route of an answer, or what is wrong with its shape.
func TestAnswerKind(t *testing.T) {
	for _, tc := range []struct {
		a    routerapi.Answer
		kind string
		err  string
	}{
		{routerapi.Answer{Agent: "coder"}, "agent", ""},
		{routerapi.Answer{Close: &routerapi.Close{Outcome: "done"}}, "close", ""},
		{routerapi.Answer{Fork: &routerapi.Fork{}}, "fork", ""},
		{routerapi.Answer{}, "", "names no route"},
		{routerapi.Answer{Agent: "coder", Fork: &routerapi.Fork{}}, "", "names 2 routes"},
		{routerapi.Answer{Close: &routerapi.Close{}}, "", "without an outcome"},
		{routerapi.Answer{Agent: "coder", Error: "no"}, "", "answered an error: no"},
	} {
		kind, err := tc.a.Kind()
		if kind != tc.kind || (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Kind(%+v) = %q, %v; want %q, %q", tc.a, kind, err, tc.kind, tc.err)
		}
	}
}
