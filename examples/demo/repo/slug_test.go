package slug

import "testing"

func TestMake(t *testing.T) {
	for _, tc := range []struct{ title, want string }{
		{"Hello World", "hello-world"},
		{"  Rath: durable   sessions! ", "rath-durable-sessions"},
		{"Go 1.26 released", "go-1-26-released"},
		{"already-a-slug", "already-a-slug"},
	} {
		if got := Make(tc.title); got != tc.want {
			t.Errorf("Make(%q) = %q, want %q", tc.title, got, tc.want)
		}
	}
}
