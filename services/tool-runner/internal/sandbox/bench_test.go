package sandbox_test

import (
	"context"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/openrath/rath/internal/proctest"
	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// BenchmarkRunEcho is the isolating backends' cost per call against the
// local backend's, for `echo` (issue 12's target: p50 ≤ 20 ms):
//
//	go test -run '^$' -bench RunEcho -benchtime 200x ./services/tool-runner/internal/sandbox
//
// Each sub-benchmark reports the p50 and p99 of its calls in ms and the CPU
// a call's processes used (the helper, bwrap, the command: cpu-ms); the
// isolated one also reports its p50 over the local p50 of the same run.
// The "+helper" ones start commands as the helper binary
// (rath-sandbox-exec) instead of this test binary.
func BenchmarkRunEcho(b *testing.B) {
	dir := b.TempDir()
	if err := proctest.BuildCommand(dir, "github.com/openrath/rath/services/tool-runner/rath-sandbox-exec"); err != nil {
		b.Fatal(err)
	}
	helper := func(c *sandbox.Config) { c.Helper = filepath.Join(dir, sandbox.HelperName) }
	var localP50 float64
	for _, bc := range []struct {
		name string
		make func(testing.TB) *sandbox.Local
	}{
		{"local", func(t testing.TB) *sandbox.Local { return newLocal(t) }},
		{"bwrap", func(t testing.TB) *sandbox.Local { return newIsolated(t) }},
		{"gvisor", func(t testing.TB) *sandbox.Local { return newIsolating(t, sandbox.BackendGVisor) }},
		{"local+helper", func(t testing.TB) *sandbox.Local { return newLocal(t, helper) }},
		{"bwrap+helper", func(t testing.TB) *sandbox.Local {
			return newIsolated(t, func(c *sandbox.Config, _ *sandbox.Isolation) { helper(c) })
		}},
		{"gvisor+helper", func(t testing.TB) *sandbox.Local {
			return newIsolating(t, sandbox.BackendGVisor, func(c *sandbox.Config, _ *sandbox.Isolation) { helper(c) })
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ws := place(b, bc.make(b), "s1", nil)
			echo := sandbox.Cmd{Args: []string{"echo", "hello"}}
			times := make([]time.Duration, 0, b.N)
			cpu0 := childCPU(b)
			for b.Loop() {
				start := time.Now()
				res, err := ws.Run(context.Background(), echo)
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("echo: %+v, %v", res, err)
				}
				times = append(times, time.Since(start))
			}
			b.ReportMetric(float64(childCPU(b)-cpu0)/float64(time.Millisecond)/float64(len(times)), "cpu-ms")
			slices.Sort(times)
			p50 := float64(times[len(times)/2]) / float64(time.Millisecond)
			b.ReportMetric(p50, "p50-ms")
			b.ReportMetric(float64(times[len(times)*99/100])/float64(time.Millisecond), "p99-ms")
			if bc.name == "local" {
				localP50 = p50
			} else if (bc.name == "bwrap" || bc.name == "gvisor") && localP50 > 0 {
				b.ReportMetric(p50/localP50, "×local")
			}
		})
	}
}

// BenchmarkRunEchoCgroup is what a call's control group (cgroup.go) adds
// to a call of `echo`: the same backends with and without it, through the
// helper binary:
//
//	go test -run '^$' -bench RunEchoCgroup -benchtime 200x ./services/tool-runner/internal/sandbox
//
// It reports the p50 and p99 of the calls in ms, the CPU of the call's
// processes (cpu-ms) and the runner's own CPU a call (runner-cpu-ms: the
// group is made, read and removed by the runner).
func BenchmarkRunEchoCgroup(b *testing.B) {
	dir := b.TempDir()
	if err := proctest.BuildCommand(dir, "github.com/openrath/rath/services/tool-runner/rath-sandbox-exec"); err != nil {
		b.Fatal(err)
	}
	helper := func(c *sandbox.Config) { c.Helper = filepath.Join(dir, sandbox.HelperName) }
	noCgroup := func(c *sandbox.Config) { c.NoCgroup = true }
	for _, bc := range []struct {
		name string
		make func(testing.TB) *sandbox.Local
	}{
		{"local+helper/cgroup", func(t testing.TB) *sandbox.Local {
			return newLocal(t, helper, func(c *sandbox.Config) { c.NoTrace = true })
		}},
		{"local+helper/none", func(t testing.TB) *sandbox.Local {
			return newLocal(t, helper, noCgroup, func(c *sandbox.Config) { c.NoTrace = true })
		}},
		{"bwrap+helper/cgroup", func(t testing.TB) *sandbox.Local {
			return newIsolated(t, func(c *sandbox.Config, _ *sandbox.Isolation) { helper(c) })
		}},
		{"bwrap+helper/none", func(t testing.TB) *sandbox.Local {
			return newIsolated(t, func(c *sandbox.Config, _ *sandbox.Isolation) { helper(c); noCgroup(c) })
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ws := place(b, bc.make(b), "s1", nil)
			echo := sandbox.Cmd{Args: []string{"echo", "hello"}}
			times := make([]time.Duration, 0, b.N)
			cpu0, self0 := childCPU(b), selfCPU(b)
			for b.Loop() {
				start := time.Now()
				res, err := ws.Run(context.Background(), echo)
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("echo: %+v, %v", res, err)
				}
				times = append(times, time.Since(start))
			}
			n := float64(len(times))
			b.ReportMetric(float64(childCPU(b)-cpu0)/float64(time.Millisecond)/n, "cpu-ms")
			b.ReportMetric(float64(selfCPU(b)-self0)/float64(time.Millisecond)/n, "runner-cpu-ms")
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2])/float64(time.Millisecond), "p50-ms")
			b.ReportMetric(float64(times[len(times)*99/100])/float64(time.Millisecond), "p99-ms")
		})
	}
}

// selfCPU is the user and system CPU of this process so far.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// childCPU is the user and system CPU of this process's waited-for
// children so far.
func childCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
