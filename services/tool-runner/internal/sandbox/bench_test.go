package sandbox_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
)

// BenchmarkRunEcho is the isolating backend's cost per call against the
// local backend's, for `echo` (issue 12's target: p50 ≤ 20 ms):
//
//	go test -run '^$' -bench RunEcho -benchtime 200x ./services/tool-runner/internal/sandbox
//
// Each sub-benchmark reports the p50 and p99 of its calls in ms; the
// isolated one also reports its p50 over the local p50 of the same run.
func BenchmarkRunEcho(b *testing.B) {
	var localP50 float64
	for _, bc := range []struct {
		name string
		make func(testing.TB) *sandbox.Local
	}{
		{"local", func(t testing.TB) *sandbox.Local { return newLocal(t) }},
		{"bwrap", func(t testing.TB) *sandbox.Local { return newIsolated(t) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ws := place(b, bc.make(b), "s1", nil)
			echo := sandbox.Cmd{Args: []string{"echo", "hello"}}
			times := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				res, err := ws.Run(context.Background(), echo)
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("echo: %+v, %v", res, err)
				}
				times = append(times, time.Since(start))
			}
			slices.Sort(times)
			p50 := float64(times[len(times)/2]) / float64(time.Millisecond)
			b.ReportMetric(p50, "p50-ms")
			b.ReportMetric(float64(times[len(times)*99/100])/float64(time.Millisecond), "p99-ms")
			if bc.name == "local" {
				localP50 = p50
			} else if localP50 > 0 {
				b.ReportMetric(p50/localP50, "×local")
			}
		})
	}
}
