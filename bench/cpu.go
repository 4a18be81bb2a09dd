package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ,
// 100 on Linux).
const clockTick = 10 * time.Millisecond

// procCPU reads the user+system CPU time a process and its waited-for
// children (a tool runner's commands) have used so far.
func procCPU(pid string) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: fields count from after it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%s/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return 0, fmt.Errorf("/proc/%s/stat: %d fields", pid, len(f))
	}
	var total int64
	for _, s := range f[11:15] { // utime, stime, cutime, cstime
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%s/stat: bad utime/stime/cutime/cstime", pid)
		}
		total += n
	}
	return time.Duration(total) * clockTick, nil
}

// systemCPU reads the CPU time all processes have used so far (every state
// of the "cpu" line of /proc/stat but idle and iowait).
func systemCPU() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		busy += n
	}
	return time.Duration(busy) * clockTick, nil
}

// cpuMeter measures the CPU the ledger process, this process (the embedded
// server, the clients and the harness) and every other process use over an
// interval. Other processes on a shared machine make figures unreliable;
// the report says how busy they kept it.
type cpuMeter struct {
	pid                  int64 // of the ledger; 0 when it runs in this process
	ledgerPID            string
	ledger0, self0, all0 time.Duration
	// workerPIDs are the worker processes the agents section runs; their
	// CPU is part of the measurement, not noise.
	workerPIDs []string
	workers0   time.Duration
	start      time.Time
}

func (h *harness) cpuStart() *cpuMeter {
	m := &cpuMeter{start: time.Now(), pid: h.ledgerPID.Load()}
	if m.pid != 0 {
		m.ledgerPID = strconv.FormatInt(m.pid, 10)
		m.ledger0, _ = procCPU(m.ledgerPID)
	}
	m.workerPIDs = h.workerPIDs()
	for _, pid := range m.workerPIDs {
		d, _ := procCPU(pid)
		m.workers0 += d
	}
	m.self0, _ = procCPU("self")
	m.all0, _ = systemCPU()
	return m
}

// cpuUse is the CPU used over an interval.
type cpuUse struct {
	ledger, self, others, wall time.Duration
	// workers is what the agents section's worker processes used.
	workers time.Duration
	// separate is set when the ledger runs in a process of its own.
	separate bool
	// partial is set when the ledger or a worker process exited during the
	// interval.
	partial bool
}

func (m *cpuMeter) stop() cpuUse {
	u := cpuUse{separate: m.pid != 0}
	if m.ledgerPID != "" {
		l, err := procCPU(m.ledgerPID)
		u.ledger, u.partial = max(l-m.ledger0, 0), err != nil
	}
	var w time.Duration
	for _, pid := range m.workerPIDs {
		d, err := procCPU(pid)
		w += d
		u.partial = u.partial || err != nil
	}
	u.workers = max(w-m.workers0, 0)
	s, _ := procCPU("self")
	a, _ := systemCPU()
	u.self = s - m.self0
	u.others = max(a-m.all0-u.ledger-u.self-u.workers, 0)
	u.wall = time.Since(m.start)
	return u
}

func (u cpuUse) cores(d time.Duration) float64 { return d.Seconds() / u.wall.Seconds() }

// perEvent says how busy the machine was, in cores: the ledger, this process
// (server and clients) and other processes; and the ledger's CPU per event
// when n > 0.
func (u cpuUse) perEvent(n int) string {
	if u.wall <= 0 {
		return ""
	}
	if !u.separate {
		s := fmt.Sprintf("CPU cores: server+ledger+client %.2f, others %.2f", u.cores(u.self), u.cores(u.others))
		if n > 0 {
			s += fmt.Sprintf("; %s CPU/event", fmtDur(u.self/time.Duration(n)))
		}
		return s
	}
	s := fmt.Sprintf("CPU cores: ledger %.2f, server+client %.2f, others %.2f", u.cores(u.ledger), u.cores(u.self), u.cores(u.others))
	if n > 0 {
		s += fmt.Sprintf("; ledger %s CPU/event", fmtDur(u.ledger/time.Duration(n)))
	}
	return s
}

// noise samples, every second, the CPU that processes other than the
// ledger and this one use: on a shared machine they take cores from the
// measurement.
type noise struct {
	stop    chan struct{}
	done    chan struct{}
	samples []float64 // cores used by others, per second
}

func (h *harness) watchNoise() *noise {
	n := &noise{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(n.done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		m := h.cpuStart()
		for {
			select {
			case <-n.stop:
				return
			case <-t.C:
			}
			u := m.stop()
			if !u.partial && h.ledgerPID.Load() == m.pid && slices.Equal(m.workerPIDs, h.workerPIDs()) {
				n.samples = append(n.samples, u.cores(u.others))
			}
			m = h.cpuStart()
		}
	}()
	return n
}

// summary stops sampling and describes what other processes used.
func (n *noise) summary() string {
	close(n.stop)
	<-n.done
	if len(n.samples) == 0 {
		return "not measured"
	}
	var sum, peak float64
	busy := 0
	for _, s := range n.samples {
		sum += s
		peak = max(peak, s)
		if s > 0.25 {
			busy++
		}
	}
	return fmt.Sprintf("mean %.2f cores, peak %.2f; %d of %d one-second samples above 0.25 cores",
		sum/float64(len(n.samples)), peak, busy, len(n.samples))
}

// waitQuiet waits, at most limit, for five seconds in which processes other
// than the ledger and this one use under 0.2 cores in total.
func (h *harness) waitQuiet(ctx context.Context, limit time.Duration) {
	deadline := time.Now().Add(limit)
	quiet := 0
	for time.Now().Before(deadline) && ctx.Err() == nil {
		m := h.cpuStart()
		time.Sleep(time.Second)
		u := m.stop()
		if u.partial || u.cores(u.others) >= 0.2 {
			quiet = 0
			continue
		}
		if quiet++; quiet == 5 {
			h.logf("machine quiet: starting")
			return
		}
	}
	h.logf("machine still busy after %s: measuring anyway (see the noise figure in the header)", limit)
}
