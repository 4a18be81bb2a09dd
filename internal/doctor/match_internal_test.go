package doctor

import "testing"

func TestMatches(t *testing.T) {
	for _, c := range []struct {
		pattern, subject string
		want             bool
	}{
		{"$JS.API.>", "$JS.API.INFO", true},
		{"$JS.API.INFO", "$JS.API.INFO", true},
		{"$JS.API.*", "$JS.API.INFO", true},
		{"$JS.API.*", "$JS.API.STREAM.INFO", false},
		{"$JS.API.STREAM.INFO.RATH_SESSIONS", "$JS.API.INFO", false},
		{">", "$JS.API.INFO", true},
		{"$JS.>", "$JS", false},
		{"rath.ledger.>", "$JS.API.INFO", false},
	} {
		if got := matches(c.pattern, c.subject); got != c.want {
			t.Errorf("matches(%q, %q) = %v, want %v", c.pattern, c.subject, got, c.want)
		}
	}
}

func TestAtLeast(t *testing.T) {
	for _, c := range []struct {
		v, min string
		want   bool
	}{
		{"2.15.2", "2.12.0", true}, {"2.12.0", "2.12.0", true}, {"2.11.9", "2.12.0", false},
		{"v3.0.0-beta.1", "2.12.0", true}, {"2.12", "2.12.0", true},
	} {
		if got, err := atLeast(c.v, c.min); err != nil || got != c.want {
			t.Errorf("atLeast(%q, %q) = %v, %v", c.v, c.min, got, err)
		}
	}
	if _, err := atLeast("nats", "2.12.0"); err == nil {
		t.Error("a version that is not one compared")
	}
}
