// Package research is the example rath demo research runs (an
// MLAgentBench-like task), embedded so that the rath binary runs it from any
// directory.
package research

import (
	"embed"

	"github.com/openrath/rath/examples/internal/layout"
)

// files are the workflow, the agents' scripts and the repository, as a txtar
// archive: Go does not embed a directory that holds a go.mod.
//
//go:embed *.yaml repo.txtar
var files embed.FS

// Repo is the directory, under the example's, that Write unpacks the
// repository into: the workspace label of the research demo's sessions.
const Repo = "repo"

// Write writes the example into dir, creating it if need be, as rath demo research
// reads it: workflow.yaml, the scripts it names, and the
// repository unpacked from repo.txtar into dir/repo.
func Write(dir string) error { return layout.Write(files, "research", dir, Repo) }
