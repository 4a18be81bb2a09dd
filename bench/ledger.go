package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/services/session-ledger/service"
)

// ledgerPkg is the session ledger's main package, relative to the module root.
const ledgerPkg = "./services/session-ledger"

// profileHook is added to the ledger's main package, through a build overlay
// that leaves the source tree untouched, when profiling is asked for: SIGUSR1
// starts a CPU profile, the next SIGUSR1 stops it.
//
//go:embed testdata/profilehook.go.txt
var profileHook []byte

// moduleRoot finds the directory of the Rath go.mod from the working
// directory upwards.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module github.com/openrath/rath\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no github.com/openrath/rath go.mod above the working directory")
		}
		dir = parent
	}
}

// buildLedger builds the session-ledger binary into dir. With profile, the
// binary carries the profiling hook.
func buildLedger(ctx context.Context, dir string, profile bool) (string, error) {
	return buildMain(ctx, dir, ledgerPkg, profile)
}

// buildMain builds the main package pkg (relative to the module root, such
// as ./cmd/rath) into dir, named as its directory. With profile, the
// binary carries the profiling hook.
func buildMain(ctx context.Context, dir, pkg string, profile bool) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, filepath.Base(pkg))
	args := []string{"build", "-o", bin}
	if profile {
		ov, err := writeProfileOverlay(dir, root, pkg)
		if err != nil {
			return "", err
		}
		args = append(args, "-overlay", ov)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// writeProfileOverlay writes the profiling hook and a go build overlay that
// adds it to each of the main packages pkgs (directories relative to the
// module root at root, such as ./services/selector) into dir, and returns
// the overlay's path. An overlay entry adds the file to that one package
// directory only: other packages of the same build stay as they are.
func writeProfileOverlay(dir, root string, pkgs ...string) (string, error) {
	hook := filepath.Join(dir, "zz_benchprofile.go")
	if err := os.WriteFile(hook, profileHook, 0o644); err != nil {
		return "", err
	}
	replace := map[string]string{}
	for _, pkg := range pkgs {
		replace[filepath.Join(root, pkg, "zz_benchprofile.go")] = hook
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": replace})
	if err != nil {
		return "", err
	}
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		return "", err
	}
	return ov, nil
}

// ledgerRun is a running session ledger: service.Run in this process (the
// topology of `rath up`), or the session-ledger binary as its own process.
// The agents section runs its worker processes as ledgerRuns too (and
// profiles them with the same hook).
type ledgerRun struct {
	name    string
	logPath string
	exited  chan struct{}
	waitErr error

	// In this process.
	cancel context.CancelFunc
	nc     *nats.Conn

	// In its own process.
	cmd     *exec.Cmd
	profDir string
	nprof   int
	nheap   int
}

// startInProcess runs service.Run on an in-process connection to ns, as
// `rath up` does; its log goes to logPath.
func (h *harness) startInProcess(name, logPath string) (*ledgerRun, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	nc, err := h.connect(auth.RoleLedger, name, true)
	if err != nil {
		logf.Close()
		return nil, err
	}
	cfg := service.ConfigIn(filepath.Dir(logPath))
	cfg.Ledger.Name = name
	cfg.Ledger.Quotas.StartsPerMinute = noStartsQuota
	ctx, cancel := context.WithCancel(context.Background())
	p := &ledgerRun{name: name, logPath: logPath, exited: make(chan struct{}), cancel: cancel, nc: nc}
	go func() {
		p.waitErr = service.Run(ctx, nc, cfg, slog.New(slog.NewJSONHandler(logf, nil)))
		nc.Close()
		logf.Close()
		close(p.exited)
	}()
	return p, nil
}

// noStartsQuota lifts the ledger's quota of sessions a tenant starts a
// minute: the bench's client, one tenant's user, starts thousands a minute
// to measure the ledger, not the quota.
const noStartsQuota = 0

// startProcess runs the ledger binary against the server at url; its log goes
// to logPath. The process dies with the harness (Pdeathsig).
func (h *harness) startProcess(bin, url, name, logPath, profDir string) (*ledgerRun, error) {
	p, err := startCommand(name, logPath, bin, []string{"--nats", url, "--creds", h.creds.Path(auth.RoleLedger), "--name", name, "--key", service.KeyFileIn(filepath.Dir(logPath)), fmt.Sprintf("--quota-starts-per-minute=%d", noStartsQuota)}, nil, profDir)
	if err != nil {
		return nil, fmt.Errorf("start ledger: %w", err)
	}
	return p, nil
}

// startCommand runs a service binary with args and the harness's
// environment plus env; its output goes to logPath. The process dies with
// the harness (Pdeathsig). The agents section runs the worker services with
// it too. With profDir, a binary built with the profiling hook writes its
// profiles there (see profile); without, the hook stays off.
func startCommand(name, logPath, bin string, args, env []string, profDir string) (*ledgerRun, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Env = append(append(os.Environ(), env...), "RATH_BENCH_PROFILE_DIR="+profDir)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &ledgerRun{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{}), profDir: profDir}
	go func() {
		p.waitErr = cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	return p, nil
}

// pid is the ledger's process ID, 0 when it runs in this process.
func (p *ledgerRun) pid() int {
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *ledgerRun) where() string {
	if p.cmd == nil {
		return "in this process"
	}
	return fmt.Sprintf("pid %d", p.cmd.Process.Pid)
}

// waitReady waits until the ledger answers a request.
func (p *ledgerRun) waitReady(ctx context.Context, c *client.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("ledger %s exited before answering: %v (log %s)", p.name, p.waitErr, p.logPath)
		default:
		}
		rctx, rcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := c.Schema(rctx, events.TypeChunkAppended)
		rcancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ledger %s not answering after 30s: %w (log %s)", p.name, err, p.logPath)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop asks the ledger to drain and stop (context cancel, or SIGTERM for a
// process), and kills a process that has not exited within grace.
func (p *ledgerRun) stop(grace time.Duration) error {
	select {
	case <-p.exited:
		return p.waitErr
	default:
	}
	if p.cmd == nil {
		p.cancel()
		select {
		case <-p.exited:
			return p.waitErr
		case <-time.After(grace):
			p.nc.Close()
			return fmt.Errorf("ledger %s did not drain within %s", p.name, grace)
		}
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.waitErr
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("ledger %s did not stop within %s after SIGTERM; killed", p.name, grace)
	}
}

// memory reads the ledger process's resident set size and its peak from
// /proc (this process's, for a ledger in this process).
func (p *ledgerRun) memory() (rss, hwm int64, err error) {
	pid := p.pid()
	if pid == 0 {
		pid = os.Getpid()
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(v)
		if len(fields) != 2 || fields[1] != "kB" {
			continue
		}
		n, _ := strconv.ParseInt(fields[0], 10, 64)
		switch k {
		case "VmRSS":
			rss = n << 10
		case "VmHWM":
			hwm = n << 10
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return rss, hwm, sc.Err()
}

// logCount counts the ledger log lines that contain every one of substrs.
func (p *ledgerRun) logCount(substrs ...string) int {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return 0
	}
	n := 0
next:
	for _, line := range strings.Split(string(b), "\n") {
		for _, s := range substrs {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		n++
	}
	return n
}

// logLine returns the first ledger log line containing substr.
func (p *ledgerRun) logLine(substr string) string {
	b, _ := os.ReadFile(p.logPath)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, substr) {
			return line
		}
	}
	return ""
}

// logSummary is the message and error of the first log line containing
// substr.
func (p *ledgerRun) logSummary(substr string) string {
	line := p.logLine(substr)
	var rec struct {
		Msg     string `json:"msg"`
		Err     string `json:"err"`
		Session string `json:"session"`
		Seq     uint64 `json:"seq"`
	}
	if json.Unmarshal([]byte(line), &rec) != nil {
		return "`" + line + "`"
	}
	s := fmt.Sprintf("%q", rec.Msg)
	if rec.Session != "" {
		s += fmt.Sprintf(" (session %s at %d)", rec.Session, rec.Seq)
	}
	if rec.Err != "" {
		s += ": " + rec.Err
	}
	return s
}

// profileWait bounds the wait for a process's hook to write a profile.
const profileWait = 15 * time.Second

// prog is the name the profiling hook gives the process's files: the base
// name of its executable.
func (p *ledgerRun) prog() string {
	return filepath.Base(p.cmd.Args[0])
}

// profile starts a CPU profile of a process (the ledger, or a worker of the
// agents section) and returns the function that stops it and moves it to
// dst. Without profiling, or in this process (whose own profile covers the
// ledger), it does nothing.
func (p *ledgerRun) profile(dst string) func() error {
	if p.profDir == "" || p.cmd == nil {
		return func() error { return nil }
	}
	p.nprof++
	name := filepath.Join(p.profDir, fmt.Sprintf("%s-cpu-%d", p.prog(), p.nprof))
	_ = os.Remove(name + ".done") // left by an earlier run into the same directory
	if err := p.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return func() error { return fmt.Errorf("%s: start CPU profile: %w", p.name, err) }
	}
	return func() error {
		if err := p.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			return fmt.Errorf("%s: stop CPU profile: %w", p.name, err)
		}
		return p.awaitProfile(name, dst, "CPU profile")
	}
}

// heapProfile writes a heap profile of the ledger (after a GC in the ledger)
// to dst. Without profiling it does nothing.
func (p *ledgerRun) heapProfile(dst string) error {
	if p.profDir == "" || p.cmd == nil {
		return nil
	}
	p.nheap++
	name := filepath.Join(p.profDir, fmt.Sprintf("%s-heap-%d", p.prog(), p.nheap))
	_ = os.Remove(name + ".done") // left by an earlier run into the same directory
	if err := p.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		return fmt.Errorf("%s: heap profile: %w", p.name, err)
	}
	return p.awaitProfile(name, dst, "heap profile")
}

// awaitProfile waits up to profileWait for the hook's .done marker beside
// name+".pprof" and moves the profile to dst.
func (p *ledgerRun) awaitProfile(name, dst, what string) error {
	deadline := time.Now().Add(profileWait)
	for {
		if _, err := os.Stat(name + ".done"); err == nil {
			_ = os.Remove(name + ".done")
			return os.Rename(name+".pprof", dst)
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s (%s) exited before writing its %s %s.pprof: %v (log %s)", p.name, p.where(), what, name, p.waitErr, p.logPath)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (%s): no %s %s.pprof (no %s.done) within %s; is %s built with the profiling hook (bench/testdata/profilehook.go.txt)? (log %s)",
				p.name, p.where(), what, name, filepath.Base(name), profileWait, p.cmd.Args[0], p.logPath)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
