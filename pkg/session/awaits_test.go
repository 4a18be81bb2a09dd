package session

import "testing"

func TestAwaits(t *testing.T) {
	open := &State{Status: StatusActive, Turn: &Turn{ID: "t1"}}
	closed := &State{Status: StatusClosed, Turn: &Turn{ID: "t1"}}
	idle := &State{Status: StatusActive}
	for _, tc := range []struct {
		name string
		st   *State
		id   string
		want bool
	}{
		{"its turn in flight", open, "t1", true},
		{"another turn", open, "t2", false},
		{"no turn in flight", idle, "t1", false},
		{"closed", closed, "t1", false},
	} {
		if got := tc.st.Awaits(tc.id); got != tc.want {
			t.Errorf("%s: Awaits(%q) = %v, want %v", tc.name, tc.id, got, tc.want)
		}
	}
}
