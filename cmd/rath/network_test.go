package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStartRefusesLoopbackNetwork: rath start checks a workflow's network
// lists before storing it. An entry naming the host's loopback (rath up's
// console, its NATS port), in any spelling, is refused naming the entry, why
// and the operator's flag; told what the operator allows, it starts.
func TestStartRefusesLoopbackNetwork(t *testing.T) {
	url := startLedger(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "coder.yaml"), []byte("- content: hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(entry string) string {
		wf := filepath.Join(dir, "w.yaml")
		src := "name: w\nnetwork: [\"" + entry + "\"]\nagents:\n  - name: coder\n    provider: scripted\n    script: coder.yaml\nrules:\n  - name: never\n    when: \"false\"\n    route: {close: {outcome: done}}\n"
		if err := os.WriteFile(wf, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return wf
	}
	for _, entry := range []string{"127.0.0.1:19464", "127.0.0.1:14222", "2130706433:14222", "[::ffff:127.0.0.1]:19464", "localhost:19464", "169.254.169.254"} {
		r := rath(t, url, "start", "--workflow", write(entry))
		if r.code != exitUsage || !strings.Contains(r.stderr, entry) || !strings.Contains(r.stderr, "network[0]") {
			t.Errorf("%s: exit %d, stderr %q; want a usage error naming network[0] and the entry", entry, r.code, r.stderr)
		}
	}
	if r := rath(t, url, "start", "--workflow", write("127.0.0.1:19464")); !strings.Contains(r.stderr, "--sandbox-allow-net 127.0.0.1:19464") {
		t.Errorf("the refusal does not say how the operator allows it: %q", r.stderr)
	}
	ok(t, url, "start", "--id", "allowed", "--sandbox-allow-net", "127.0.0.1:19464", "--workflow", write("127.0.0.1:19464"))
}
