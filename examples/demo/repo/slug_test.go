package slug

import "testing"

func TestMake(t *testing.T) {
	for title, want := range map[string]string{
		"Hello World":                  "hello-world",
		"  Rath: durable   sessions! ": "rath-durable-sessions",
		"Go 1.26 released":             "go-1-26-released",
		"already-a-slug":               "already-a-slug",
	} {
		if got := Make(title); got != want {
			t.Errorf("Make(%q) = %q, want %q", title, got, want)
		}
	}
}
