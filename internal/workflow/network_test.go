package workflow_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/egress"
	"github.com/openrath/rath/internal/workflow"
)

// hostile are network entries a tenant's workflow could try for the host's
// loopback, its networks and a cloud's metadata service: each is refused
// where a workflow is checked, in the workflow's list and in an agent's.
var hostile = []string{
	"127.0.0.1:19464", "127.0.0.1:14222", "127.0.0.1", "127.0.0.1.", "127.0.0.1.:4222", "127.9.9.9",
	"2130706433", "2130706433:4222", "0x7f000001", "0x7f.1", "127.1", "127.0.1", "0177.0.0.1", "127.000.000.001",
	"0.0.0.0", "0.0.0.0:4222", "0", "::", "[::]:80", "::1", "[::1]", "[::1]:80", "0:0::1",
	"::ffff:127.0.0.1", "[::ffff:127.0.0.1]:19464", "::ffff:7f00:1", "::127.0.0.1",
	"64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "2002:7f00:1::", "2002:a9fe:a9fe::1", "2001::1",
	"169.254.169.254", "169.254.169.254:80", "2852039166", "0xa9.0xfe.0xa9.0xfe", "fd00:ec2::254", "100.100.100.200",
	"169.254.0.1", "10.0.0.1", "10.1", "172.16.0.1", "192.168.0.1:8080", "100.64.0.1", "224.0.0.1", "255.255.255.255",
	"fd00::1", "fe80::1", "fe80::1%eth0", "[fe80::1%25eth0]:80", "ff02::1",
	"localhost", "localhost:19464", "LocalHost.", "console.localhost", "*.localhost", "localhost.localdomain",
	"metadata.google.internal", "*.google.internal", "metadata", "host.docker.internal",
}

func TestNetworkRefusesWhatIsNotPublic(t *testing.T) {
	agent := strings.Replace(base, "    provider: openai", "    provider: openai\n    network: [example.com, %s]", 1)
	for _, h := range hostile {
		q := strconv.Quote(h)
		for src, field := range map[string]string{
			"network: [" + q + "]\n" + base:    "network[0]",
			strings.Replace(agent, "%s", q, 1): "agents[0].network[1]",
		} {
			_, err := workflow.Parse([]byte(src), "w.yaml")
			var spec *workflow.SpecError
			if !errors.As(err, &spec) || len(spec.Problems) != 1 || spec.Problems[0].Field != field {
				t.Errorf("%s %q: %v, want one problem at %s", field, h, err, field)
				continue
			}
			if msg := spec.Problems[0].Message; !strings.Contains(msg, h) {
				t.Errorf("%s %q: %q does not name the entry", field, h, msg)
			}
		}
	}
	// The refusal says how the operator allows it.
	_, err := workflow.Parse([]byte("network: [\"127.0.0.1:19464\"]\n"+base), "w.yaml")
	if err == nil || !strings.Contains(err.Error(), "loopback") || !strings.Contains(err.Error(), egress.AllowFlag+" 127.0.0.1:19464") {
		t.Errorf("refusal %v: want it to say loopback and %s", err, egress.AllowFlag)
	}
}

// What the operator's allowlist names is admitted, and nothing more.
func TestNetworkAllowedByTheOperator(t *testing.T) {
	allow, err := egress.ParseAllowlist([]string{"127.0.0.1:8080,10.0.0.0/8,localhost:3000"})
	if err != nil {
		t.Fatal(err)
	}
	src := "network: [\"127.0.0.1:8080\", \"10.1.2.3:5432\", \"localhost:3000\", example.com]\n" + base
	if _, err := workflow.Parse([]byte(src), "w.yaml", workflow.AllowNet(allow)); err != nil {
		t.Fatal(err)
	}
	if _, err := workflow.Parse([]byte(src), "w.yaml"); err == nil {
		t.Fatal("admitted without the allowlist")
	}
	for _, h := range []string{"127.0.0.1:8081", "127.0.0.1", "2130706433:8080", "localhost:3001", "172.16.0.1:80", "169.254.169.254"} {
		if _, err := workflow.Parse([]byte("network: ["+strconv.Quote(h)+"]\n"+base), "w.yaml", workflow.AllowNet(allow)); err == nil {
			t.Errorf("%q admitted: the allowlist does not name it", h)
		}
	}
}

// A stored bundle opens whatever well-formed destinations it names: the
// services that open it do not know the operator's allowlist, and the tool
// runner decides. Malformed entries are still refused.
func TestBundleLeavesDestinationsToTheRunner(t *testing.T) {
	open := func(spec string) error {
		data, _ := json.Marshal(workflow.Bundle{Path: "w.yaml", Spec: []byte(spec)})
		_, _, err := workflow.OpenBundle(data)
		return err
	}
	if err := open("network: [\"127.0.0.1:19464\", localhost]\n" + base); err != nil {
		t.Errorf("bundle naming loopback: %v", err)
	}
	if err := open("network: [\"http://x\"]\n" + base); err == nil {
		t.Error("bundle with a malformed entry opened")
	}
}
