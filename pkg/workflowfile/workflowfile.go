// Package workflowfile loads a workflow file (docs/workflows.md) and stores
// it as the bundle a session runs: the package a Go program imports to
// start a pkg/rath session from a file. It links the workflow parser and
// its expression language, which pkg/rath, pkg/client and the other
// contracts keep out (ADR 0038).
package workflowfile

import (
	"context"
	"fmt"

	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/rath"
)

// File is a workflow file read, parsed and checked by Load.
type File struct {
	path string
	wf   *workflow.Workflow
}

// Load reads, parses and checks the workflow file at path; a file with
// problems is an error naming them.
func Load(path string) (File, error) {
	wf, err := workflow.Load(path)
	if err != nil {
		return File{}, err
	}
	return File{path: path, wf: wf}, nil
}

// Name returns the workflow's name.
func (f File) Name() string { return f.wf.Name }

// Hash returns the hash of the workflow's spec, as a session records it.
func (f File) Hash() string { return f.wf.Hash() }

// Store bundles the file and the scripts it names and stores the bundle as
// a blob through c, as rath start --workflow does, returning what
// rath.StartOptions.Workflow takes. The bundle is content-addressed:
// storing the same file twice returns the same reference.
func (f File) Store(ctx context.Context, c *client.Client) (rath.StoredWorkflow, error) {
	if f.wf == nil {
		return rath.StoredWorkflow{}, fmt.Errorf("store workflow: no file loaded (use workflowfile.Load)")
	}
	ref, err := workflow.Store(ctx, f.wf, c.PutBlob)
	if err != nil {
		return rath.StoredWorkflow{}, fmt.Errorf("store workflow %s: %w", f.path, err)
	}
	return rath.StoredWorkflow{Name: f.wf.Name, Hash: f.wf.Hash(), Ref: ref}, nil
}

// Store loads the workflow file at path and stores it through c: Load, then
// File.Store.
func Store(ctx context.Context, c *client.Client, path string) (rath.StoredWorkflow, error) {
	f, err := Load(path)
	if err != nil {
		return rath.StoredWorkflow{}, err
	}
	return f.Store(ctx, c)
}
