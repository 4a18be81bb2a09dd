// Package demo is the example rath demo runs, embedded so that the rath
// binary runs it from any directory.
package demo

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
// repository into: the workspace label of the demo's sessions.
const Repo = "repo"

// Write writes the example into dir, creating it if need be, as rath demo
// reads it: workflow.yaml, the scripts it names, and the
// repository unpacked from repo.txtar into dir/repo.
func Write(dir string) error { return layout.Write(files, "demo", dir, Repo) }
