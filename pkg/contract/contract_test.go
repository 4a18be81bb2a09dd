package contract_test

import (
	"bytes"
	"maps"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// light are the contracts a program links to use Rath. pkg/workflowfile is
// not among them: it is the one that loads a workflow file, and links the
// parser to do it.
var light = []string{
	"github.com/openrath/rath/pkg/rath",
	"github.com/openrath/rath/pkg/agentserver",
	"github.com/openrath/rath/pkg/client",
	"github.com/openrath/rath/pkg/toolserver",
	"github.com/openrath/rath/pkg/agentapi",
}

// heavy matches the dependencies none of them may have: CEL, any YAML
// parser, a service's code, the workflow engine.
var heavy = regexp.MustCompile(`(?i)cel\.dev/|yaml|/services/|/internal/workflow(/|$)`)

// Every light contract's dependencies (its imports, transitively, tests
// excluded, as go list -deps lists them) are free of the heavy ones; a
// failure names the contract, the dependency and the packages that import
// it, the edges to cut.
func TestContractsStayLight(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command lists the contracts' dependencies and is not on PATH: %v", err)
	}
	for _, pkg := range light {
		t.Run(path.Base(pkg), func(t *testing.T) {
			imports := graph(t, goBin, pkg)
			if len(imports) == 0 {
				t.Fatalf("go list -deps %s listed nothing", pkg)
			}
			for _, dep := range slices.Sorted(maps.Keys(imports)) {
				if !heavy.MatchString(dep) {
					continue
				}
				var by []string
				for p, imps := range imports {
					if slices.Contains(imps, dep) {
						by = append(by, p)
					}
				}
				slices.Sort(by)
				t.Errorf("%s depends on %s (imported by %s): keep CEL, YAML, internal/workflow and the services out of the contracts (ADR 0038)",
					pkg, dep, strings.Join(by, ", "))
			}
		})
	}
}

// graph runs go list -deps on pkg and returns each package it lists (pkg
// and its dependencies) with that package's direct imports.
func graph(t *testing.T, goBin, pkg string) map[string][]string {
	t.Helper()
	cmd := exec.Command(goBin, "list", "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`, pkg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v: %s", pkg, err, stderr.Bytes())
	}
	imports := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) > 0 {
			imports[fields[0]] = fields[1:]
		}
	}
	return imports
}
