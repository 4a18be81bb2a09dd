package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/openrath/rath/internal/eval"
)

// loadEvalSet loads rath eval's file: a task file, or a SWE-bench
// instance file (.jsonl, .json) whose instances run workflow unless they
// name their own. done removes what loading wrote (the instances'
// workspaces, each its repository at its base commit), once the eval no
// longer needs them.
func loadEvalSet(ctx context.Context, path, workflow string) (set *eval.Set, done func(), err error) {
	done = func() {}
	if !eval.IsInstanceFile(path) {
		if workflow != "" {
			return nil, done, errors.New("--workflow is for a SWE-bench instance file (.jsonl or .json); a task file names each task's workflow")
		}
		set, err = eval.Load(path)
		return set, done, err
	}
	dir, err := os.MkdirTemp("", "rath-eval-swebench-")
	if err != nil {
		return nil, done, fmt.Errorf("instance workspaces: %w", err)
	}
	done = func() { _ = os.RemoveAll(dir) }
	set, err = eval.LoadSWEBench(ctx, path, eval.SWEBenchOptions{Workflow: workflow, Dir: dir})
	if err != nil {
		done()
		return nil, func() {}, err
	}
	return set, done, nil
}
