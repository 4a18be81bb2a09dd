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
	// Some cases break the health wiring, which differs before and after the
	// services serve --http (issue 14 item 2): state says which it needs.
	const (
		always = ""
		noHTTP = "the services serve no --http"
		http   = "the services serve --http"
	)
	cases := []struct {
		name, file, old, new string
		check                func(*testing.T, string) []error
		want                 string
		state                string
	}{
		{"unknown flag", "docker-compose.yml", "- --replicas=3\n      - --key", "- --replica=3\n      - --key", checkCompose, "session-ledger has no flag --replica", always},
		{"no such binary", "docker-compose.yml", "      - selector\n", "      - selectorr\n", checkCompose, `command "selectorr" names no service binary`, always},
		{"another role's credentials", "docker-compose.yml", "--creds=/run/secrets/selector.nk", "--creds=/run/secrets/agent-worker.nk", checkCompose, "want the selector role's file selector.nk", always},
		{"secret from another role's file", "docker-compose.yml", `ledger-creds: { file: "${RATH_CREDS_DIR:-./rath-creds}/ledger.nk" }`, `ledger-creds: { file: "${RATH_CREDS_DIR:-./rath-creds}/admin.nk" }`, checkCompose, "not a ledger.nk file", always},
		{"small max_payload", "deploy/nats-cluster.conf", "max_payload: 8MB", "max_payload: 1MB", checkCompose, "max_payload is 1048576", always},
		{"two routes", "deploy/nats-cluster.conf", "    nats-route://nats-3:6222\n", "", checkCompose, "routes go to [nats-1 nats-2]", always},
		{"waits for a health check nobody has", "docker-compose.yml", "session-ledger-1: { condition: service_started }", "session-ledger-1: { condition: service_healthy }", checkCompose, "but session-ledger-1 has no health check", noHTTP},
		{"no image target", "deploy/Dockerfile", "FROM distroless AS selector\n", "FROM distroless AS selector2\n", checkCompose, `no stage "selector"`, always},
		{"one agent worker", "docker-compose.yml", "deploy: { replicas: 2 }", "deploy: { replicas: 1 }", checkCompose, "runs 1 agent-worker, want at least 2", always},
		{"R1 ledger", "docker-compose.yml", "      - --replicas=3\n      - --key=/etc/rath/keys/ledger.key\n      - --trust=${RATH_LEDGER_TRUST:-}\n      - --approvers=/run/secrets/approvers\n      - --name=ledger-2", "      - --replicas=1\n      - --key=/etc/rath/keys/ledger.key\n      - --trust=${RATH_LEDGER_TRUST:-}\n      - --approvers=/run/secrets/approvers\n      - --name=ledger-2", checkCompose, `--replicas "1", want 3`, always},

		{"an environment variable nobody reads", "docker-compose.yml", "OPENAI_API_KEY: ${OPENAI_API_KEY:-}", "OPENAI_KEY: ${OPENAI_API_KEY:-}", checkCompose, "sets OPENAI_KEY, which agent-worker does not read", always},

		{"the root binary in the context", ".dockerignore", "/rath\n", "", checkDockerignore, ".dockerignore lets rath into the build context", always},
		{"sources left out", ".dockerignore", "docs/\n", "docs/\npkg/\n", checkDockerignore, "which the image build needs", always},

		{"no probe and no TODO", "deploy/kubernetes/selector.yaml", "        rath.openrath.dev/probes:", "        rath.openrath.dev/other:", checkKubernetes, "no probes, and no rath.openrath.dev/probes annotation", noHTTP},
		{"a health check on another port", "docker-compose.yml", "http://127.0.0.1:9464/readyz", "http://127.0.0.1:9465/readyz", checkCompose, "does not ask /healthz or /readyz on --http's port 9464", http},
		{"a probe on another port", "deploy/kubernetes/selector.yaml", "httpGet: { path: /readyz, port: http }", "httpGet: { path: /readyz, port: 9465 }", checkKubernetes, "a probe on port 9465, but --http listens on 9464", http},
		{"NATS without a health check", "docker-compose.yml", `test: ["CMD", "wget", "-q", "-O", "/dev/null", "http://127.0.0.1:8222/healthz"]`, `test: ["NONE"]`, checkCompose, "waits for nats-1 to be healthy, but nats-1 has no health check", always},
		{"no resources", "deploy/kubernetes/memory-svc.yaml", "            limits: { memory: 2Gi }\n", "", checkKubernetes, "needs resources", always},
		{"unknown consumer", "deploy/kubernetes/keda.yaml", "consumer: agent-worker\n", "consumer: agent-workers\n", checkKubernetes, `consumer "agent-workers" is no durable consumer`, always},
		{"misspelled probe", "deploy/kubernetes/nats/nats.yaml", "          livenessProbe:", "          livenesProbe:", checkKubernetes, "unknown field StatefulSet.spec.template.spec.containers[0].livenesProbe", always},
		{"another role's secret item", "deploy/kubernetes/session-ledger.yaml", "items: [{ key: ledger.nk, path: ledger.nk }, { key: approvers, path: approvers }]", "items: [{ key: selector.nk, path: selector.nk }, { key: approvers, path: approvers }]", checkKubernetes, "has no item ledger.nk", always},
		{"unknown flag in a pod", "deploy/kubernetes/memory-svc.yaml", "- --replicas=3", "- --replica=3", checkKubernetes, "memory-svc has no flag --replica", always},
		{"small max_payload on Kubernetes", "deploy/kubernetes/nats/nats-cluster.conf", "max_payload: 8MB", "max_payload: 64KB", checkKubernetes, "max_payload is 65536", always},
		{"scaling a missing workload", "deploy/kubernetes/keda.yaml", "kind: Deployment, name: selector }", "kind: Deployment, name: selectors }", checkKubernetes, "scales Deployment/selectors, which the kustomization does not define", always},
		{"undefined variable", "deploy/kubernetes/session-ledger.yaml", "--name=$(POD_NAME)", "--name=$(POD)", checkKubernetes, "refers to $(POD)", always},
	}
	_, serves := binaries(t)["selector"].flags["http"]
	state := map[bool]string{false: noHTTP, true: http}[serves]
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
			if tc.state != always && tc.state != state {
				t.Skipf("a case for when %s; now %s", tc.state, state)
			}
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
