package testrig

import (
	"context"
	"testing"

	"github.com/openrath/rath/internal/workflow"
	"github.com/openrath/rath/pkg/eventstore"
)

// Bundle stores wf's bundle (the workflow file and its scripts) in store's
// blobs and returns its reference: the workflow_ref a session starts with,
// as rath run uploads it. A workflow that does not bundle fails the test.
func Bundle(t testing.TB, store *eventstore.Store, wf *workflow.Workflow) string {
	t.Helper()
	ref, err := workflow.Store(context.Background(), wf, store.PutBlob)
	if err != nil {
		t.Fatalf("workflow %s: %v", wf.Name, err)
	}
	return ref
}
