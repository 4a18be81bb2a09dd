package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestChecksCatchBrokenFiles breaks a copy of the deployment files one way
// at a time and expects the checks to say what is wrong: a check that never
// fails checks nothing.
func TestChecksCatchBrokenFiles(t *testing.T) {
	cases := []struct {
		name, file, old, new string
		check                func(*testing.T, string) []error
		want                 string
	}{
		{"unknown flag", "docker-compose.yml", "- --replicas=3\n      - --key", "- --replica=3\n      - --key", checkCompose, "session-ledger has no flag --replica"},
		{"no such binary", "docker-compose.yml", "      - selector\n", "      - selectorr\n", checkCompose, `command "selectorr" names no service binary`},
		{"another role's credentials", "docker-compose.yml", "--creds=/run/secrets/selector.creds", "--creds=/run/secrets/agent-worker.creds", checkCompose, "want the selector role's file selector.creds"},
		{"secret from another role's file", "docker-compose.yml", `ledger-creds: { file: "${RATH_CREDS_DIR:-./rath-creds}/ledger.creds" }`, `ledger-creds: { file: "${RATH_CREDS_DIR:-./rath-creds}/admin.creds" }`, checkCompose, "not a ledger.creds file"},
		{"small max_payload", "deploy/nats-cluster.conf", "max_payload: 8MB", "max_payload: 1MB", checkCompose, "max_payload is 1048576"},
		{"two routes", "deploy/nats-cluster.conf", "    nats-route://nats-3:6222\n", "", checkCompose, "routes go to [nats-1 nats-2]"},
		{"waits for a health check nobody has", "docker-compose.yml", "session-ledger-1: { condition: service_started }", "session-ledger-1: { condition: service_healthy }", checkCompose, "but session-ledger-1 has no health check"},
		{"no image target", "deploy/Dockerfile", "FROM distroless AS selector\n", "FROM distroless AS selector2\n", checkCompose, `no stage "selector"`},
		{"one agent worker", "docker-compose.yml", "deploy: { replicas: 2 }", "deploy: { replicas: 1 }", checkCompose, "runs 1 agent-worker, want at least 2"},
		{"R1 ledger", "docker-compose.yml", "      - --replicas=3\n      - --key=/etc/rath/keys/ledger.key\n      - --trust=${RATH_LEDGER_TRUST:-}\n      - --name=ledger-2", "      - --replicas=1\n      - --key=/etc/rath/keys/ledger.key\n      - --trust=${RATH_LEDGER_TRUST:-}\n      - --name=ledger-2", checkCompose, `--replicas "1", want 3`},

		{"an environment variable nobody reads", "docker-compose.yml", "OPENAI_API_KEY: ${OPENAI_API_KEY:-}", "OPENAI_KEY: ${OPENAI_API_KEY:-}", checkCompose, "sets OPENAI_KEY, which agent-worker does not read"},

		{"the root binary in the context", ".dockerignore", "/rath\n", "", checkDockerignore, ".dockerignore lets rath into the build context"},
		{"sources left out", ".dockerignore", "docs/\n", "docs/\npkg/\n", checkDockerignore, "which the image build needs"},

		{"no probe and no TODO", "deploy/kubernetes/selector.yaml", "        rath.openrath.dev/probes:", "        rath.openrath.dev/other:", checkKubernetes, "no probes, and no rath.openrath.dev/probes annotation"},
		{"no resources", "deploy/kubernetes/memory-svc.yaml", "            limits: { memory: 2Gi }\n", "", checkKubernetes, "needs resources"},
		{"unknown consumer", "deploy/kubernetes/keda.yaml", "consumer: agent-worker\n", "consumer: agent-workers\n", checkKubernetes, `consumer "agent-workers" is no durable consumer`},
		{"misspelled probe", "deploy/kubernetes/nats/nats.yaml", "          livenessProbe:", "          livenesProbe:", checkKubernetes, "unknown field StatefulSet.spec.template.spec.containers[0].livenesProbe"},
		{"another role's secret item", "deploy/kubernetes/session-ledger.yaml", "items: [{ key: ledger.creds, path: ledger.creds }]", "items: [{ key: selector.creds, path: selector.creds }]", checkKubernetes, "has no item ledger.creds"},
		{"unknown flag in a pod", "deploy/kubernetes/memory-svc.yaml", "- --replicas=3", "- --replica=3", checkKubernetes, "memory-svc has no flag --replica"},
		{"small max_payload on Kubernetes", "deploy/kubernetes/nats/nats-cluster.conf", "max_payload: 8MB", "max_payload: 64KB", checkKubernetes, "max_payload is 65536"},
		{"scaling a missing workload", "deploy/kubernetes/keda.yaml", "kind: Deployment, name: selector }", "kind: Deployment, name: selectors }", checkKubernetes, "scales Deployment/selectors, which the kustomization does not define"},
		{"undefined variable", "deploy/kubernetes/session-ledger.yaml", "--name=$(POD_NAME)", "--name=$(POD)", checkKubernetes, "refers to $(POD)"},
	}
	binaries(t)
	credentials(t)
	pristine := copyDeployment(t)
	if errs := checkCompose(t, pristine); len(errs) > 0 {
		t.Fatalf("the unbroken copy fails: %v", errs)
	}
	if errs := checkKubernetes(t, pristine); len(errs) > 0 {
		t.Fatalf("the unbroken copy fails: %v", errs)
	}
	if errs := checkDockerignore(t, pristine); len(errs) > 0 {
		t.Fatalf("the unbroken copy fails: %v", errs)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := copyDeployment(t)
			file := filepath.Join(root, tc.file)
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), tc.old) {
				t.Fatalf("%s no longer contains %q: update this case", tc.file, tc.old)
			}
			if err := os.WriteFile(file, []byte(strings.Replace(string(b), tc.old, tc.new, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			errs := tc.check(t, root)
			var msgs []string
			for _, err := range errs {
				msgs = append(msgs, err.Error())
				if strings.Contains(err.Error(), tc.want) {
					t.Logf("caught: %v", err)
					return
				}
			}
			t.Errorf("broken %s: want an error containing %q, got:\n%s", tc.file, tc.want, strings.Join(msgs, "\n"))
		})
	}
}

// copyDeployment copies docker-compose.yml and deploy/ (without this
// package's Go files) into a new directory laid out as the repository.
func copyDeployment(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	copyFile := func(rel string) {
		b, err := os.ReadFile(filepath.Join(repoRoot, rel))
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	copyFile("docker-compose.yml")
	copyFile(".dockerignore")
	err := filepath.WalkDir(filepath.Join(repoRoot, "deploy"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".go") {
			return err
		}
		rel, err := filepath.Rel(repoRoot, path)
		if err != nil {
			return err
		}
		copyFile(rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return root
}
