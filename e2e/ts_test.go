package e2e_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/natstest"
)

// The TypeScript SDK (sdk/typescript) is built (npm ci, tsc) and its tests
// run with node --test against a real runtime: start, emit, state, log,
// atomic and batch appends, refusals with their codes, fork and merge, an
// inbox proposal, a watch that skips forged live events and checks
// signatures, receipts checked offline, and hostile credentials and another
// tenant's names. The chain hashes its tests recompute are Go's, of every
// golden event kind and of hard canonical cases. Node and npm are required:
// without them the test fails, naming the tool.
func TestTypeScriptSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("runs npm ci, tsc and node on sdk/typescript")
	}
	node, npm := needTool(t, "node"), needTool(t, "npm")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	dir := buildSDK(ctx, t, npm, node)
	other := events.Principal{Tenant: "acme", User: "alice"}
	r := startUsers(t, other)
	vectors := filepath.Join(t.TempDir(), "vectors.json")
	writeChainVectors(t, vectors)
	schemas, err := filepath.Abs(filepath.Join("..", "pkg", "schema", "schemas"))
	if err != nil {
		t.Fatal(err)
	}

	run := exec.CommandContext(ctx, node, "--test", "--test-concurrency=1",
		filepath.Join("dist", "test", "unit.test.js"), filepath.Join("dist", "test", "runtime.test.js"))
	run.Dir = dir
	run.Env = append(os.Environ(),
		"RATH_NATS_URL="+r.url,
		"RATH_CREDS="+natstest.CredsFile(t, r.url, auth.RoleClient),
		"RATH_ADMIN_CREDS="+natstest.CredsFile(t, r.url, auth.RoleAdmin),
		"RATH_OTHER_CREDS="+auth.UserPath(natstest.CredsDir(t, r.url), other),
		"RATH_VECTORS="+vectors,
		"RATH_SCHEMAS="+schemas,
	)
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test on sdk/typescript: %v\n%s", err, out)
	}
	t.Logf("node --test:\n%s", out)
	if !strings.Contains(string(out), "# fail 0") {
		t.Errorf("node --test did not report 0 failures")
	}
}

// buildSDK copies sdk/typescript without node_modules and build output into
// a temporary directory (which it returns), installs exactly its
// package-lock.json there and compiles it with tsc, so the source tree gets
// no node_modules.
func buildSDK(ctx context.Context, t *testing.T, npm, node string) string {
	t.Helper()
	src, err := filepath.Abs(filepath.Join("..", "sdk", "typescript"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "sdk", "typescript")
	copyTree(t, src, dir)
	ci := exec.CommandContext(ctx, npm, "ci", "--prefer-offline")
	ci.Dir = dir
	ci.Env = append(os.Environ(), "npm_config_update_notifier=false")
	if out, err := ci.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in a copy of sdk/typescript: %v\n%s", err, out)
	}
	tsc := exec.CommandContext(ctx, node, filepath.Join("node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.json")
	tsc.Dir = dir
	if out, err := tsc.CombinedOutput(); err != nil {
		t.Fatalf("tsc in a copy of sdk/typescript: %v\n%s", err, out)
	}
	return dir
}

// copyTree copies the files under src to dst, leaving out node_modules and
// dist.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "node_modules" || d.Name() == "dist" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
}

// chainVector is a stored body and the chain hash Go computes for it.
type chainVector struct {
	Name string `json:"name"`
	Body string `json:"body"`
	Hash string `json:"hash"`
}

// hardBodies are stored bodies whose canonical form is easy to get wrong:
// numbers as IEEE doubles, member order by UTF-16 code units (a non-BMP key
// sorts before U+FFFF), escapes, extensions of every type, and rathhash and
// rathsig out of canonical order.
var hardBodies = map[string]string{
	"numbers":    `{"specversion":"1.0","id":"n","source":"s","type":"rath.work.done","subject":"s1","data":{"n":[1e21,1e-7,0.1,-0,100,1.5,123456789012345678901234567890,9007199254740993,-1e-300,5e-324]},"rathseq":1,"rathhash":"00"}`,
	"keys":       `{"subject":"s1","data":{"\u00e9":1,"e":2,"\ud83d\ude00":3,"\uffff":4,"":5,"A":6,"a":7,"10":8,"9":9},"rathseq":2,"rathsig":"k:s","rathprev":"ab"}`,
	"strings":    `{"data":{"s":"\u2028\u2029\t\n\r\b\f\u0001\u007f\"\\/<>&\u00e9\ud83d\ude00","t":"plain"},"type":"x"}`,
	"nested":     `{"data":{"a":[[],{},[{"z":null,"y":false}],true],"o":{"b":{"c":{}}}},"rathseq":3}`,
	"extensions": `{"specversion":"1.0","id":"x","source":"s","type":"t","subject":"s","xint":5,"flag":true,"causationid":"c","rathseq":7,"rathhash":"h","rathsig":"sig"}`,
}

// writeChainVectors writes, as JSON, the bodies the ledger seals for the
// data of every golden event kind (pkg/events/testdata) and the hard
// bodies, each with the chain hash Go computes.
func writeChainVectors(t *testing.T, path string) {
	t.Helper()
	golden, err := filepath.Glob(filepath.Join("..", "pkg", "events", "testdata", "*.v1.json"))
	if err != nil || len(golden) == 0 {
		t.Fatalf("golden event files: %v (%d)", err, len(golden))
	}
	var out []chainVector
	prev := ""
	for i, f := range golden {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		kind := strings.TrimSuffix(filepath.Base(f), ".v1.json")
		ev, err := events.NewRaw("golden", "rath."+kind, data, events.WithSource("e2e/golden"))
		if err != nil {
			t.Fatal(err)
		}
		body, hash, err := events.Seal(&ev, uint64(i+1), prev, nil)
		if err != nil {
			t.Fatalf("seal %s: %v", kind, err)
		}
		out = append(out, chainVector{Name: kind, Body: string(body), Hash: hash})
		prev = hash
	}
	for name, body := range hardBodies {
		hash, err := events.ComputeHash([]byte(body))
		if err != nil {
			t.Fatalf("hash %s: %v", name, err)
		}
		out = append(out, chainVector{Name: name, Body: body, Hash: hash})
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
