package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openrath/rath/internal/egress"
	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// isolating are the isolating backends, which every isolation test below
// runs on.
var isolating = []string{sandbox.BackendBwrap, sandbox.BackendGVisor}

// eachIsolating runs test once per isolating backend, as a subtest named
// after it.
func eachIsolating(t *testing.T, test func(t *testing.T, backend string)) {
	for _, name := range isolating {
		t.Run(name, func(t *testing.T) {
			test(t, name)
		})
	}
}

// newIsolated returns the bwrap backend rooted in a temporary directory.
func newIsolated(t testing.TB, opts ...func(*sandbox.Config, *sandbox.Isolation)) *sandbox.Local {
	t.Helper()
	return newIsolating(t, sandbox.BackendBwrap, opts...)
}

// newIsolating returns an isolating backend rooted in a temporary
// directory. A machine without the backend's program (bwrap, runsc) or
// where it cannot start a sandbox fails the test, naming what is missing:
// the isolation tests are never skipped.
func newIsolating(t testing.TB, backend string, opts ...func(*sandbox.Config, *sandbox.Isolation)) *sandbox.Local {
	t.Helper()
	cfg := sandbox.DefaultConfig()
	// A short root: the proxy's unix socket lives under it, and a socket's
	// path is at most 107 bytes; t.TempDir's name holds the test's.
	root, err := os.MkdirTemp("", "sbx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	cfg.Root = root
	cfg.Limits.Timeout = 20 * time.Second
	cfg.Limits.Output = 64 << 10
	if gobin, err := exec.LookPath("go"); err == nil {
		cfg.Path = filepath.Dir(gobin) + ":" + cfg.Path
	}
	iso := sandbox.DefaultIsolation()
	for _, o := range opts {
		o(&cfg, &iso)
	}
	var b *sandbox.Local
	switch backend {
	case sandbox.BackendBwrap:
		if _, err := exec.LookPath("bwrap"); err != nil {
			t.Fatalf("the bwrap backend needs bubblewrap (bwrap), which is not installed: run scripts/install-sandbox.sh (apt-get install bubblewrap): %v", err)
		}
		b, err = sandbox.NewIsolated(cfg, iso)
	case sandbox.BackendGVisor:
		if _, err := exec.LookPath("runsc"); err != nil {
			t.Fatalf("the gvisor backend needs gVisor's runsc, which is not installed: run scripts/install-sandbox.sh (apt-get install runsc): %v", err)
		}
		b, err = sandbox.NewGVisor(cfg, iso)
	default:
		t.Fatalf("no isolating backend %q", backend)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Probe(context.Background()); err != nil {
		t.Fatalf("%s cannot start a sandbox on this machine: %v", backend, err)
	}
	return b
}

func TestIsolatedBasics(t *testing.T) {
	t.Parallel()
	eachIsolating(t, func(t *testing.T, backend string) {
		b := newIsolating(t, backend)
		ws := place(t, b, "s1", nil)
		if ws.Backend() != backend || ws.ID() != backend+"-s1" {
			t.Errorf("backend %q id %q", ws.Backend(), ws.ID())
		}
		// bwrap's user inside is 1000 (a user namespace maps it); gVisor's
		// is the tenant's host user, whose IDs the gofer gives the files.
		uid := "1000"
		if backend == sandbox.BackendGVisor {
			u, _ := b.HostUID("")
			uid = strconv.Itoa(u)
		}
		res := run(t, ws, sh("pwd; id -u; echo hi > f; cat f; echo err >&2; exit 3"))
		if res.ExitCode != 3 || res.Stdout != ws.Dir()+"\n"+uid+"\nhi\n" || res.Stderr != "err\n" {
			t.Errorf("got %+v", res)
		}
		if got := readFile(t, ws.Dir()+"/f"); got != "hi\n" {
			t.Errorf("f = %q", got)
		}
		if !strings.Contains(res.Limits, "nproc=") {
			t.Errorf("limits %q", res.Limits)
		}
		// No capability, none to gain.
		res = run(t, ws, sh(`grep -E '^Cap(Eff|Prm|Bnd|Amb)' /proc/self/status | cut -f2 | sort -u`))
		if res.Stdout != "0000000000000000\n" {
			t.Errorf("capabilities inside: %q", res.Stdout)
		}
	})
}

// Each escape below is tried with real processes in a real sandbox; each
// must be contained, say what stopped it, and leave the host unchanged.

func TestIsolatedHidesHostProcesses(t *testing.T) {
	t.Setenv("RATH_TEST_API_KEY", "sk-host-secret-4242")
	eachIsolating(t, func(t *testing.T, backend string) {
		ws := place(t, newIsolating(t, backend), "s1", nil)
		res := run(t, ws, sh(`for p in /proc/[0-9]*; do tr "\0" "\n" < $p/environ; done; env`))
		if strings.Contains(res.Stdout, "sk-host-secret-4242") || strings.Contains(res.Stdout, "RATH_TEST_API_KEY") {
			t.Fatalf("a sandboxed command read the runner's environment:\n%s", res.Stdout)
		}
		// bwrap's init, the shell and its pipeline: nothing of the host.
		res = run(t, ws, sh(`cd /proc && echo [0-9]*`))
		pids := strings.Fields(res.Stdout)
		for _, p := range pids {
			if n, err := strconv.Atoi(p); err != nil || n > 10 {
				t.Errorf("the sandbox sees processes %q", pids)
				break
			}
		}
		// pid 1 is the sandbox's own init: bwrap's, or on gVisor the
		// command itself, the first process of gVisor's kernel.
		res = run(t, ws, sh(`tr "\0" " " < /proc/1/cmdline`))
		if want := map[string]string{sandbox.BackendBwrap: "bwrap --unshare-user", sandbox.BackendGVisor: "sh -c tr"}[backend]; !strings.Contains(res.Stdout, want) {
			t.Errorf("pid 1 is %q, want %q", res.Stdout, want)
		}
	})
}

// processesWith lists the host's processes whose command line contains
// marker.
func processesWith(t *testing.T, marker string) []string {
	t.Helper()
	return processes(t, func(_ int, cmdline []byte) bool {
		return bytes.Contains(cmdline, []byte(marker)) && !bytes.Contains(cmdline, []byte("-test."))
	})
}

// processes lists the host's live processes (zombies run nothing: they
// only wait for the host's init to reap them) for which match, given the
// process's uid and command line, is true.
func processes(t *testing.T, match func(uid int, cmdline []byte) bool) []string {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		fi, err1 := os.Stat("/proc/" + d.Name())
		stat, err2 := os.ReadFile("/proc/" + d.Name() + "/stat")
		cmdline, err3 := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err1 != nil || err2 != nil || err3 != nil {
			continue // gone meanwhile
		}
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && match(int(st.Uid), cmdline) {
			found = append(found, d.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return found
}

func TestIsolatedLeavesNoProcess(t *testing.T) {
	t.Parallel()
	eachIsolating(t, func(t *testing.T, backend string) {
		b := newIsolating(t, backend)
		_, root := b.Location()
		ws := place(t, b, "s1", nil)
		// A setsid'd daemon, a double fork and a plain background job, each
		// holding no pipe of the run's, then a clean exit.
		res := run(t, ws, sh(`setsid sh -c 'exec sleep 1000.101' </dev/null >/dev/null 2>&1 &
sh -c '(exec sleep 1000.102 </dev/null >/dev/null 2>&1 &) ' 
nohup sleep 1000.103 </dev/null >/dev/null 2>&1 &
echo started`))
		if res.ExitCode != 0 || res.Stdout != "started\n" {
			t.Fatalf("got %+v", res)
		}
		if left := processesWith(t, "1000.10"); len(left) > 0 {
			t.Errorf("processes outlived the call: %q", left)
		}
		// The same after a timeout kill.
		c := sh(`setsid sh -c 'exec sleep 1000.104' </dev/null >/dev/null 2>&1 & sleep 1000.105`)
		c.Timeout = 300 * time.Millisecond
		res = run(t, ws, c)
		if !res.TimedOut || !res.Killed {
			t.Fatalf("got %+v, want timed out", res)
		}
		if left := processesWith(t, "1000.10"); len(left) > 0 {
			t.Errorf("processes outlived the timeout: %q", left)
		}
		// Nor is any process of the sandbox itself left (bwrap, runsc and
		// gVisor's sandbox and gofer name the backend's root).
		if left := processesWith(t, root); len(left) > 0 {
			t.Errorf("the sandbox outlived the timeout: %q", left)
		}
	})
}

func TestIsolatedForkBomb(t *testing.T) {
	t.Parallel()
	eachIsolating(t, func(t *testing.T, backend string) {
		b := newIsolating(t, backend, func(c *sandbox.Config, i *sandbox.Isolation) { i.Processes = 64 })
		ws := place(t, b, "s1", &sandbox.Seed{Tenant: "bomber"})
		// Processes that stay alive, until fork fails.
		res := run(t, ws, sh(`n=0; while sleep 1000.201 & do n=$((n+1)); echo $n > count; done`))
		if res.ExitCode == 0 || !strings.Contains(res.Stderr, "Cannot fork") {
			t.Errorf("fork bomb: %+v, want it stopped by the process limit", res)
		}
		if !strings.Contains(res.Limits, "nproc=64") {
			t.Errorf("limits %q do not name the process limit", res.Limits)
		}
		if n, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(ws.Dir(), "count")))); err != nil || n >= 64 {
			t.Errorf("the bomb started %d processes (%v), want fewer than its limit of 64", n, err)
		}
		if left := processesWith(t, "1000.201"); len(left) > 0 {
			t.Errorf("%d processes of the bomb outlived the call", len(left))
		}
		if os.Geteuid() == 0 {
			if left := processesOfUID(t, uidOf(t, ws)); len(left) > 0 {
				t.Errorf("%d processes of the sandbox user outlived the call: %q", len(left), left)
			}
		}
		// The host can still fork, and the workspace still runs commands.
		if res := run(t, ws, sandbox.Cmd{Args: []string{"true"}}); res.ExitCode != 0 {
			t.Errorf("after the bomb: %+v", res)
		}
	})
}

// uidOf is the host uid a workspace's commands run as: the owner of a file
// one of them creates.
func uidOf(t *testing.T, ws sandbox.Workspace) int {
	t.Helper()
	if res := run(t, ws, sandbox.Cmd{Args: []string{"touch", "owned"}}); res.ExitCode != 0 {
		t.Fatalf("touch: %+v", res)
	}
	fi, err := os.Stat(filepath.Join(ws.Dir(), "owned"))
	if err != nil {
		t.Fatal(err)
	}
	uid := int(fi.Sys().(*syscall.Stat_t).Uid)
	if uid == 0 {
		t.Fatal("the sandbox user is the host's root")
	}
	return uid
}

func processesOfUID(t *testing.T, uid int) []string {
	t.Helper()
	return processes(t, func(u int, _ []byte) bool { return u == uid })
}

func TestIsolatedMemoryHog(t *testing.T) {
	t.Parallel()
	eachIsolating(t, func(t *testing.T, backend string) {
		ws := place(t, newIsolating(t, backend, func(c *sandbox.Config, _ *sandbox.Isolation) { c.Limits.Memory = 512 << 20 }), "s1", nil)
		res := run(t, ws, sandbox.Cmd{Args: []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=1G", "count=1"}})
		if res.ExitCode == 0 || !strings.Contains(res.Stderr, "memory exhausted") {
			t.Errorf("1 GiB under 512 MiB: %+v, want dd refused its memory", res)
		}
		if !strings.Contains(res.Limits, "as=536870912B") {
			t.Errorf("limits %q do not name the memory limit", res.Limits)
		}
	})
}

func TestIsolatedNoNetwork(t *testing.T) {
	t.Parallel()
	eachIsolating(t, func(t *testing.T, backend string) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		port := ln.Addr().(*net.TCPAddr).Port
		ws := place(t, newIsolating(t, backend), "s1", nil)
		res := run(t, ws, sandbox.Cmd{Args: []string{"bash", "-c", fmt.Sprintf("echo hello > /dev/tcp/127.0.0.1/%d && echo connected; ls /sys/class/net 2>/dev/null; cat /proc/net/dev | tail -n +3 | cut -d: -f1", port)}})
		if strings.Contains(res.Stdout, "connected") {
			t.Fatalf("a sandboxed command reached the host's loopback: %+v", res)
		}
		if strings.Fields(res.Stdout)[0] != "lo" || len(strings.Fields(res.Stdout)) != 1 {
			t.Errorf("interfaces inside: %q, want lo alone", res.Stdout)
		}
		// Nothing is waiting to be accepted: the connection never happened.
		ln.(*net.TCPListener).SetDeadline(time.Now())
		if c, err := ln.Accept(); err == nil {
			c.Close()
			t.Error("the host's listener got a connection from the sandbox")
		}
	})
}

func TestIsolatedFilesystem(t *testing.T) {
	t.Parallel()
	eachIsolating(t, func(t *testing.T, backend string) {
		b := newIsolating(t, backend)
		_, root := b.Location()
		// A secret beside the workspaces, as the runner's keys are beside its
		// data; and another session's workspace.
		secret := filepath.Join(filepath.Dir(root), "ledger.key")
		writeFiles(t, filepath.Dir(root), map[string]string{"ledger.key": "private"})
		other := place(t, b, "other", nil)
		writeFiles(t, other.Dir(), map[string]string{"secret.txt": "other's"})
		ws := place(t, b, "s1", nil)

		res := run(t, ws, sh(fmt.Sprintf(`cat %[1]s; cat %[2]s/secret.txt; cat ../other/secret.txt; ls %[3]s
echo x > /usr/pwned; echo x > %[4]s/pwned; echo x > ../other/pwned; echo x > /pwned; echo x > .git/hooks/pre-commit
echo ok > inside; echo tmp > /tmp/t && cat /tmp/t`, secret, other.Dir(), root, filepath.Dir(root))))
		for _, leak := range []string{"private", "other's"} {
			if strings.Contains(res.Stdout, leak) {
				t.Errorf("a sandboxed command read %q:\n%s", leak, res.Stdout)
			}
		}
		if strings.Contains(res.Stdout, "other") {
			t.Errorf("the sandbox lists other workspaces: %q", res.Stdout)
		}
		if !strings.HasSuffix(res.Stdout, "tmp\n") {
			t.Errorf("/tmp is not writable inside: %q", res.Stdout)
		}
		for _, p := range []string{"/usr/pwned", filepath.Join(filepath.Dir(root), "pwned"), filepath.Join(other.Dir(), "pwned"), "/pwned", filepath.Join(ws.Dir(), ".git/hooks/pre-commit")} {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("a sandboxed command wrote %s", p)
			}
		}
		if got := readFile(t, filepath.Join(ws.Dir(), "inside")); got != "ok\n" {
			t.Errorf("inside = %q", got)
		}
		// Nothing but /tmp, /dev/shm (both bounded) and the binds is writable:
		// bwrap's own root and /dev are tmpfs, which are made read-only.
		res = run(t, ws, sh(`for f in /x /dev/x /etc/x /run/x; do touch $f 2>/dev/null && echo wrote $f; done; touch /dev/shm/ok /tmp/ok && echo bounded ok`))
		if res.Stdout != "bounded ok\n" {
			t.Errorf("writable outside the workspace and the bounded tmpfs: %q", res.Stdout)
		}
		// gVisor's tmpfs is slow to fill here (tens of seconds on a loaded
		// machine): the bound, not the time, is what is tested.
		fill := sh(`head -c 300000000 /dev/zero > /dev/shm/big || echo refused`)
		fill.Timeout = 5 * time.Minute
		res = run(t, ws, fill)
		if !strings.Contains(res.Stdout, "refused") {
			t.Errorf("/dev/shm took 300 MB past its 256 MiB bound: %+v", res)
		}
		// The toolchain is there, read-only.
		res = run(t, ws, sh(`go version && go env GOROOT && touch "$(go env GOROOT)/x"`))
		if !strings.Contains(res.Stdout, "go version go1.") || res.ExitCode == 0 {
			t.Errorf("toolchain: %+v, want go present and its root read-only", res)
		}
	})
}

func TestIsolatedHugeOutput(t *testing.T) {
	t.Parallel()
	eachIsolating(t, func(t *testing.T, backend string) {
		ws := place(t, newIsolating(t, backend, func(c *sandbox.Config, _ *sandbox.Isolation) { c.Limits.Output = 1 << 20 }), "s1", nil)
		c := sh("yes | head -c 100000000")
		c.Timeout = 5 * time.Minute // gVisor's pipes are slow on a loaded machine
		res := run(t, ws, c)
		if res.ExitCode != 0 || !res.Truncated || res.StdoutBytes != 100_000_000 || len(res.Stdout) != 1<<20 {
			t.Fatalf("got exit %d, truncated %v, %d bytes, %d kept", res.ExitCode, res.Truncated, res.StdoutBytes, len(res.Stdout))
		}
	})
}

func TestIsolatedLimitsSayWhatStopped(t *testing.T) {
	t.Parallel()
	eachIsolating(t, func(t *testing.T, backend string) {
		ws := place(t, newIsolating(t, backend, func(c *sandbox.Config, _ *sandbox.Isolation) {
			c.Limits.CPU = time.Second
			c.Limits.FileSize = 1 << 20
		}), "s1", nil)
		res := run(t, ws, sh("while :; do :; done"))
		if !res.Killed || res.Stopped != "CPU-time limit 1s of a process" {
			t.Errorf("busy loop: %+v, want stopped by the CPU limit", res)
		}
		res = run(t, ws, sandbox.Cmd{Args: []string{"dd", "if=/dev/zero", "of=big", "bs=1M", "count=2"}})
		if !res.Killed || res.Stopped != "file-size limit" {
			t.Errorf("dd past the file size limit: %+v", res)
		}
	})
}

// TestIsolatedGoCache: go builds inside the sandbox with a cache of the
// tenant's own, seeded from the runner's without letting the sandbox change
// the runner's files.
func TestIsolatedGoCache(t *testing.T) {
	t.Parallel()
	eachIsolating(t, func(t *testing.T, backend string) {
		host := t.TempDir()
		writeFiles(t, host, map[string]string{"00/0011-d": "host entry"})
		b := newIsolating(t, backend, func(c *sandbox.Config, _ *sandbox.Isolation) {
			c.Env = []string{"GOCACHE=" + host, "GOPROXY=off", "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod"}
		})
		ws := place(t, b, "s1", &sandbox.Seed{Tenant: "gocache"})
		writeFiles(t, ws.Dir(), map[string]string{"go.mod": "module example.com/p\n\ngo 1.22\n", "p.go": "package p\n\nfunc F() int { return 1 }\n"})
		res := run(t, ws, sh(`go env GOCACHE; cat /cache/go-build/00/0011-d; echo; echo evil > /cache/go-build/00/0011-d || echo refused; go build ./... && echo built`))
		if os.Geteuid() == 0 {
			if !strings.Contains(res.Stdout, "host entry") || !strings.Contains(res.Stdout, "refused") {
				t.Errorf("a root runner's cache is seeded read-only: %+v", res)
			}
		}
		if !strings.HasPrefix(res.Stdout, "/cache/go-build\n") || !strings.HasSuffix(res.Stdout, "built\n") {
			t.Errorf("go in the sandbox: %+v", res)
		}
		if got := readFile(t, filepath.Join(host, "00/0011-d")); got != "host entry" {
			t.Errorf("the sandbox changed the runner's cache: %q", got)
		}
	})
}

// TestIsolatedAllowedHosts: a call allowed a host reaches it through the
// sandbox's proxy, and nothing else; the proxy's decisions are the call's
// evidence.
func TestIsolatedAllowedHosts(t *testing.T) {
	t.Parallel()
	eachIsolating(t, func(t *testing.T, backend string) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello from the allowed host, path %s\n", r.URL.Path)
		}))
		defer srv.Close()
		other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			t.Errorf("a refused host was reached: %s", r.URL)
		}))
		defer other.Close()
		allowedHost := strings.TrimPrefix(srv.URL, "http://")
		otherHost := strings.TrimPrefix(other.URL, "http://")

		// Both listen on the host's loopback, which only the operator's
		// allowlist opens, and it names one.
		ws := place(t, newIsolating(t, backend, func(c *sandbox.Config, _ *sandbox.Isolation) {
			c.Net.Allow = mustAllow(t, allowedHost)
		}), "s1", nil)
		// bash speaks HTTP to the proxy the environment names; curl may not be
		// installed.
		get := func(hostport, path string) string {
			return fmt.Sprintf(`u=${HTTP_PROXY#http://}; exec 3<>/dev/tcp/${u%%:*}/${u##*:} && printf 'GET http://%[1]s%[2]s HTTP/1.1\r\nHost: %[1]s\r\nConnection: close\r\n\r\n' >&3 && cat <&3; exec 3>&-`, hostport, path)
		}
		c := sandbox.Cmd{Args: []string{"bash", "-c", get(allowedHost, "/ok") + "; echo ---; " + get(otherHost, "/no") + "; echo ---; echo hi > /dev/tcp/" + strings.ReplaceAll(otherHost, ":", "/") + " || echo direct refused"},
			Hosts: []string{allowedHost}}
		res := run(t, ws, c)
		parts := strings.Split(res.Stdout, "---\n")
		if len(parts) != 3 {
			t.Fatalf("got %+v", res)
		}
		if !strings.Contains(parts[0], "200 OK") || !strings.Contains(parts[0], "hello from the allowed host, path /ok") {
			t.Errorf("allowed host: %q", parts[0])
		}
		if !strings.Contains(parts[1], "403 Forbidden") || !strings.Contains(parts[1], "is not among the hosts") {
			t.Errorf("other host: %q", parts[1])
		}
		if !strings.Contains(parts[2], "direct refused") {
			t.Errorf("a direct connection: %q", parts[2])
		}
		want := []string{"GET " + allowedHost + " allowed", "GET " + otherHost + " refused"}
		if !slices.Equal(res.Network, want) {
			t.Errorf("network evidence %q, want %q", res.Network, want)
		}
		// Without hosts, there is no proxy at all.
		res = run(t, ws, sandbox.Cmd{Args: []string{"bash", "-c", "echo proxy=$HTTP_PROXY"}})
		if res.Stdout != "proxy=\n" || res.Network != nil {
			t.Errorf("without hosts: %+v", res)
		}
		if _, err := ws.Run(context.Background(), sandbox.Cmd{Args: []string{"true"}, Hosts: []string{"bad/host"}}); err == nil {
			t.Error("a malformed host was accepted")
		}
		// The other loopback port, which the operator did not allow: refused
		// before the command runs, naming the entry.
		_, err := ws.Run(context.Background(), sandbox.Cmd{Args: []string{"true"}, Hosts: []string{otherHost}})
		if err == nil || !strings.Contains(err.Error(), otherHost) || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("a loopback port the operator did not allow: %v", err)
		}
	})
}

// TestIsolatedProxyRefusesPrivateNamesAndEndsWithTheCall: a name that
// leads to the host's loopback is refused, by name (localhost) before the
// command runs, or when a command asks for a name that resolves there (this
// host's own name) as it connects, the refusal in the call's network log;
// only the operator's allowlist opens the address. A connection to an
// upstream that never answers ends with the call instead of holding Run.
func TestIsolatedProxyRefusesPrivateNamesAndEndsWithTheCall(t *testing.T) {
	t.Parallel()
	eachIsolating(t, func(t *testing.T, backend string) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		held := make(chan net.Conn, 1)
		go func() {
			c, err := ln.Accept()
			if err == nil {
				held <- c // accepted, never answered, never closed
			}
		}()
		port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		ws := place(t, newIsolating(t, backend, func(c *sandbox.Config, _ *sandbox.Isolation) {
			c.Net.Allow = mustAllow(t, "127.0.0.1:"+port)
		}), "s1", nil)
		connect := func(hostport string) string {
			return `u=${HTTP_PROXY#http://}; exec 3<>/dev/tcp/${u%:*}/${u##*:}; printf 'CONNECT ` + hostport + ` HTTP/1.1\r\nHost: ` + hostport + `\r\n\r\n' >&3; head -c 12 <&3; echo`
		}
		for _, h := range []string{"localhost", "console.localhost", "localhost.localdomain"} {
			_, err := ws.Run(context.Background(), sandbox.Cmd{Args: []string{"bash", "-c", connect(h + ":" + port)}, Hosts: []string{h + ":" + port}})
			if err == nil || !strings.Contains(err.Error(), h+":"+port) {
				t.Errorf("%s allowed by name: %v", h, err)
			}
		}
		if name, err := os.Hostname(); err == nil && resolves(name) {
			// Another loopback port, which the operator did not allow.
			other, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			hp := name + ":" + strconv.Itoa(other.Addr().(*net.TCPAddr).Port)
			res := run(t, ws, sandbox.Cmd{Args: []string{"bash", "-c", connect(hp)}, Hosts: []string{hp}})
			if !strings.Contains(res.Stdout, "403") || len(res.Network) != 1 || !strings.Contains(res.Network[0], "refused: "+name+" resolves to ") {
				t.Errorf("this host's name %s: %+v", name, res)
			}
		}
		// An allowed upstream that accepts and never answers: the tunnel to it
		// ends with the call. The call is ended (cancelled) once the upstream
		// has the proxy's connection, not by a short timeout, which a loaded
		// machine could pass before the command even reached the proxy.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		accepted := make(chan net.Conn, 1)
		go func() {
			up := <-held
			accepted <- up
			cancel()
		}()
		c := sandbox.Cmd{Args: []string{"bash", "-c", connect("127.0.0.1:"+port) + "; sleep 100"}, Hosts: []string{"127.0.0.1:" + port}, Timeout: 10 * time.Minute}
		if _, err := ws.Run(ctx, c); !errors.Is(err, context.Canceled) {
			t.Errorf("the call through a silent upstream ended with %v, want its cancellation", err)
		}
		var up net.Conn
		select {
		case up = <-accepted: // sent before the cancel that ended the call
		default:
			t.Fatal("the proxy never dialled the allowed upstream")
		}
		defer up.Close()
		// The proxy closed its side when the call ended: the upstream reads
		// the end of the stream (the deadline only bounds a failure).
		_ = up.SetReadDeadline(time.Now().Add(time.Minute))
		if n, err := up.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
			t.Errorf("the tunnel to the upstream outlived the call: read %d bytes, %v", n, err)
		}
	})
}

func resolves(name string) bool {
	_, err := net.LookupHost(name)
	return err == nil
}

func mustAllow(t *testing.T, entries ...string) egress.Allowlist {
	t.Helper()
	l, err := egress.ParseAllowlist(entries)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestNoInheritedDescriptors: a descriptor the runner's process holds
// without close-on-exec (a socket a supervisor passed, say) reaches no
// command, isolated or local.
func TestNoInheritedDescriptors(t *testing.T) {
	var p [2]int
	if err := syscall.Pipe(p[:]); err != nil { // no O_CLOEXEC
		t.Fatal(err)
	}
	defer syscall.Close(p[0])
	defer syscall.Close(p[1])
	for _, b := range []*sandbox.Local{newLocal(t), newIsolated(t), newIsolating(t, sandbox.BackendGVisor)} {
		ws := place(t, b, "s1", nil)
		res := run(t, ws, sh(`cd /proc/self/fd && echo *`))
		// 0, 1, 2 and the directory echo's shell reads.
		if f := strings.Fields(res.Stdout); len(f) > 4 {
			t.Errorf("%s: the command holds descriptors %q", ws.Backend(), f)
		}
	}
}

// A runner's probe seeds no tenant's build cache: it walked and hard-linked
// the runner's whole GOCACHE before the runner could take a call.
func TestProbeSeedsNoCache(t *testing.T) {
	t.Parallel()
	eachIsolating(t, func(t *testing.T, backend string) {
		gocache := t.TempDir()
		if err := os.WriteFile(filepath.Join(gocache, "entry"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		var root string
		newIsolating(t, backend, func(c *sandbox.Config, _ *sandbox.Isolation) {
			c.Env = append(c.Env, "GOCACHE="+gocache)
			root = c.Root
		})
		entries, err := filepath.Glob(filepath.Join(root, ".cache", "*", "go-build", "*"))
		if err != nil || len(entries) != 0 {
			t.Fatalf("build cache entries after the probe: %v, %v; want none", entries, err)
		}
	})
}

// TestGVisorOpensNoHostSocket: a unix socket of the host's that a command
// can name (one placed in its workspace) is not a way out of a gVisor
// sandbox: runsc opens host sockets only for a call with allowed hosts
// (--host-uds=open), whose proxy socket is one. (bwrap shows a socket file
// in its mounts as it is, so there a host listener would answer; the
// runner keeps none in them.)
func TestGVisorOpensNoHostSocket(t *testing.T) {
	t.Parallel()
	ws := place(t, newIsolating(t, sandbox.BackendGVisor), "s1", nil)
	ln, err := net.Listen("unix", filepath.Join(ws.Dir(), "host.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Chmod(filepath.Join(ws.Dir(), "host.sock"), 0o777); err != nil {
		t.Fatal(err)
	}
	script := `import socket
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("host.sock")
    print("connected")
except OSError as e:
    print("refused", e.errno)`
	res := run(t, ws, sandbox.Cmd{Args: []string{"python3", "-c", script}})
	if !strings.HasPrefix(res.Stdout, "refused") {
		t.Errorf("a command without allowed hosts opened a host socket: %+v", res)
	}
}
