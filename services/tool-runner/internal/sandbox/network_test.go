package sandbox

import "testing"

func TestAllowedHosts(t *testing.T) {
	rules, err := ParseHosts([]string{"proxy.golang.org", "*.github.com", "127.0.0.1:8080", "Example.COM.:8443"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host string
		port int
		want bool
	}{
		{"proxy.golang.org", 443, true},
		{"proxy.golang.org", 80, true},
		{"proxy.golang.org", 22, false},
		{"PROXY.golang.org.", 443, true},
		{"proxy.golang.org.evil.com", 443, false},
		{"evilproxy.golang.org", 443, false},
		{"api.github.com", 443, true},
		{"a.b.github.com", 443, true},
		{"github.com", 443, false},
		{"evilgithub.com", 443, false},
		{"127.0.0.1", 8080, true},
		{"127.0.0.1", 443, false},
		{"example.com", 8443, true},
		{"example.com", 443, false},
	} {
		if got := allowed(rules, c.host, c.port); got != c.want {
			t.Errorf("%s:%d allowed = %v, want %v", c.host, c.port, got, c.want)
		}
	}
	for _, bad := range []string{"", "a/b", "user@host", "host:0", "host:99999", "host:x", "*", "*.", "-x"} {
		if _, err := ParseHosts([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
