package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// environment describes the machine and the software a run measured.
type environment struct {
	goVersion   string
	cpus        int
	cpuModel    string
	memTotal    string
	natsServer  string
	natsGo      string
	sync        string
	scale       float64
	proposal    int // bytes of one chunk proposal as the client sends it
	stored      int // bytes of one stored (sealed) chunk event
	chunkBytes  int
	ledgerBuild string
	started     time.Time
	// noise is what other processes on the machine used during the run.
	noise string
	// tree is the commit measured and how far the work tree differs from it.
	tree string
}

func readEnvironment(cfg config) environment {
	e := environment{
		goVersion:  runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		cpus:       runtime.NumCPU(),
		cpuModel:   firstField("/proc/cpuinfo", "model name"),
		memTotal:   firstField("/proc/meminfo", "MemTotal"),
		natsServer: server.VERSION,
		natsGo:     depVersion("github.com/nats-io/nats.go"),
		sync:       "default (sync_interval 2m: ack = in the OS page cache)",
		scale:      cfg.scale,
		chunkBytes: cfg.chunkBytes,
		started:    time.Now().UTC(),
		tree:       treeState(),
	}
	e.ledgerBuild = "service.Run in the harness process on an in-process connection (as `rath up`)"
	if cfg.ledgerProcess {
		e.ledgerBuild = "the session-ledger binary as its own process"
	}
	if cfg.has(sectionMemory) {
		e.ledgerBuild += "; section 4 runs a fresh session-ledger binary as its own process"
	}
	if cfg.profileDir != "" {
		e.ledgerBuild += " (built with the profiling hook)"
	}
	if cfg.syncAlways {
		e.sync = "SyncAlways (fsync before every ack)"
	}
	return e
}

func (e environment) write(w io.Writer, cfg config) {
	fmt.Fprintf(w, "## Rath vs raw JetStream — %s\n\n", e.started.Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(w, "- Go: %s; CPUs: %d (GOMAXPROCS %d) %s; memory: %s\n", e.goVersion, e.cpus, runtime.GOMAXPROCS(0), e.cpuModel, e.memTotal)
	fmt.Fprintf(w, "- nats-server %s embedded (file storage, temp dir, loopback TCP), nats.go %s\n", e.natsServer, e.natsGo)
	fmt.Fprintf(w, "- sync: %s\n", e.sync)
	fmt.Fprintf(w, "- other processes on the machine during the run: %s\n", e.noise)
	fmt.Fprintf(w, "- tree: %s\n", e.tree)
	fmt.Fprintf(w, "- scale: %g; sections: %s; ledger: %s\n", e.scale, strings.Join(cfg.sections, ","), e.ledgerBuild)
	fmt.Fprintf(w, "- payload: chunk event with %d-byte content: proposal %d B, stored sealed body %d B (the raw runs publish these stored bodies)\n\n",
		e.chunkBytes, e.proposal, e.stored)
}

func firstField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return "?"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "?"
}

func depVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "?"
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			return d.Version
		}
	}
	return "?"
}

// treeState names the commit the run measured and the files that differ from
// it outside the harness, which other work may be changing at the same time.
func treeState() string {
	root, err := moduleRoot()
	if err != nil {
		return "?"
	}
	head, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "not a git checkout"
	}
	out, _ := exec.Command("git", "-C", root, "status", "--porcelain").Output()
	var changed []string
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if len(line) < 4 {
			continue
		}
		path := line[3:]
		if strings.HasPrefix(path, "bench/") || path == "docs/benchmarks.md" || path == "docs/" {
			continue
		}
		changed = append(changed, path)
	}
	s := "commit " + strings.TrimSpace(string(head))
	if len(changed) > 0 {
		s += fmt.Sprintf(" + uncommitted changes in %d paths (%s)", len(changed), strings.Join(changed, ", "))
	}
	return s
}
