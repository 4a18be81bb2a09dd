package console_test

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/console"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/natstest"
)

// The console answers only requests naming one of its addresses: a page a
// browser loaded from any other name (DNS rebinding: attacker.example
// resolving to 127.0.0.1) is refused before anything else, its static
// files and sign-in included.
func TestHostIsChecked(t *testing.T) {
	ns, _ := natstest.Start(t)
	testrig.Ledger(t, ns.ClientURL())
	c, err := client.New(natstest.ConnectAs(t, ns.ClientURL(), auth.RoleClient))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		// listen is the address the console is told it serves ("": none
		// told); port stands for the test server's.
		listen    string
		names     []string
		ok, wrong []string
	}{{
		name:   "loopback",
		listen: "127.0.0.1:port",
		ok:     []string{"127.0.0.1:port", "localhost:port", "LocalHost:port", "[::1]:port", "127.0.0.2:port"},
		wrong: []string{"attacker.example:port", "attacker.example", "localhost", "127.0.0.1", "127.0.0.1:other", "localhost.:port",
			"127.0.0.1.nip.io:port", "localhost.attacker.example:port", "2130706433:port", "0x7f000001:port", "127.1:port",
			"10.0.0.1:port", "[fe80::1%25eth0]:port", "0.0.0.0:port"},
	}, {
		name:   "loopback with operator's names",
		listen: "127.0.0.1:port",
		names:  []string{"console.example.com", "Other.Example:8443"},
		ok:     []string{"console.example.com", "console.example.com:443", "CONSOLE.example.com:port", "other.example:8443", "localhost:port"},
		wrong:  []string{"other.example", "other.example:8444", "evil.console.example.com", "console.example.com.attacker.example", "attacker.example:port"},
	}, {
		name:   "every address",
		listen: "0.0.0.0:port",
		ok:     []string{"127.0.0.1:port", "localhost:port", "10.1.2.3:port", "[2001:db8::1]:port"},
		wrong:  []string{"attacker.example:port", "10.1.2.3:other", "myhost:port"},
	}, {
		name:   "one address",
		listen: "10.1.2.3:port",
		ok:     []string{"10.1.2.3:port"},
		wrong:  []string{"127.0.0.1:port", "localhost:port", "10.1.2.4:port", "attacker.example:port"},
	}, {
		name:  "not told its address: loopback only",
		ok:    []string{"127.0.0.1:port", "localhost:other", "[::1]:port"},
		wrong: []string{"attacker.example:port", "10.1.2.3:port"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var port string
			web := serve(t, false, func(addr string) http.Handler {
				_, port, _ = net.SplitHostPort(addr)
				var opts []console.Option
				if tc.listen != "" {
					opts = append(opts, console.WithHosts(strings.ReplaceAll(tc.listen, "port", port), tc.names...))
				}
				srv, err := console.New(c, slog.New(slog.DiscardHandler), opts...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(srv.Close)
				return srv
			})
			other := strconv.Itoa(mustAtoi(t, port) + 1)
			host := func(h string) string {
				return strings.ReplaceAll(strings.ReplaceAll(h, ":port", ":"+port), ":other", ":"+other)
			}
			for _, h := range tc.ok {
				if code, body := getHost(t, web.URL+"/api/sessions", host(h)); code != http.StatusOK {
					t.Errorf("Host %s: %d, want 200:\n%s", host(h), code, body)
				}
			}
			for _, h := range tc.wrong {
				for _, path := range []string{"/api/sessions", "/", "/assets/app.js", "/login"} {
					code, body := getHost(t, web.URL+path, host(h))
					if code != http.StatusMisdirectedRequest || !strings.Contains(body, "does not answer to the host") {
						t.Errorf("Host %s, %s: %d, want 421:\n%s", host(h), path, code, body)
					}
				}
			}
		})
	}
}

// A console told a wrong address or name does not start.
func TestHostsRefused(t *testing.T) {
	for _, opt := range []console.Option{
		console.WithHosts("no port"),
		console.WithHosts("127.0.0.1:80", "a/b"),
		console.WithHosts("127.0.0.1:80", "user@host"),
		console.WithHosts("127.0.0.1:80", ""),
	} {
		if _, err := console.New(nil, nil, opt, console.WithLogin(console.Login{URL: "nats://127.0.0.1:1"})); err == nil {
			t.Error("a console with a wrong address started")
		}
	}
}

func getHost(t *testing.T, url, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
