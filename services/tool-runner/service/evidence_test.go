package service_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/openrath/rath/internal/evidence"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/services/tool-runner/service"
)

// The runner records a result cut inside a rune at the inline limit as
// valid UTF-8, without the half rune, in the completion and in the model's
// chunk, and keeps the whole in the blob store; a diff that is not UTF-8
// (a Latin-1 file) keeps its bytes in the blob store, however short.
func TestRunnerRecordsValidUTF8(t *testing.T) {
	r := setupWith(t, backendWorkflow(""), func(c *service.Config) { c.Backend = "local" })
	r.startWith(t, "u1", nil)
	ctx := context.Background()
	blob := func(ref string) string {
		t.Helper()
		b, err := r.store.GetBlob(ctx, ref)
		if err != nil {
			t.Fatalf("blob %q: %v", ref, err)
		}
		return string(b)
	}

	// The limit falls after the second byte of the euro sign.
	content := strings.Repeat("a", evidence.InlineLimit-2) + "€ and the rest\n"
	wrote := r.ok(t, "u1", "w1", "plain", "write_file", fmt.Sprintf(`{"path":"big.txt","content":%q}`, content))
	diffHead, _, _ := strings.Cut(wrote.Diff, "\n… [")
	if !utf8.ValidString(wrote.Diff) || wrote.DiffRef == "" || !strings.HasPrefix(blob(wrote.DiffRef), diffHead) {
		t.Fatalf("write's diff: valid %v, ref %q", utf8.ValidString(wrote.Diff), wrote.DiffRef)
	}

	req := &events.ToolRequested{CallID: "r1", Tool: "read_file", Agent: "plain", Arguments: []byte(`{"path":"big.txt"}`)}
	if _, err := r.c.Emit(ctx, "u1", req); err != nil {
		t.Fatal(err)
	}
	got := of(t, r.finish(t, "u1", "r1"), "r1")
	chunk, _ := got[len(got)-2].(*events.ChunkAppended)
	read, ok := got[len(got)-1].(*events.ToolCompleted)
	if !ok || chunk == nil {
		t.Fatalf("read's events: %#v", got)
	}
	head, note, _ := strings.Cut(read.Result, "\n… [")
	if want := strings.Repeat("a", evidence.InlineLimit-2); head != want || !utf8.ValidString(read.Result) {
		t.Fatalf("read's result: %d bytes ending %q, valid %v; want %d a's", len(head), head[max(len(head)-8, 0):], utf8.ValidString(read.Result), len(want))
	}
	if note != fmt.Sprintf("%d bytes in all: %s]", len(content), read.ResultRef) || blob(read.ResultRef) != content {
		t.Fatalf("read's note %q, ref %q", note, read.ResultRef)
	}
	if chunk.Content != read.Result {
		t.Fatalf("the model's chunk differs from the result: %d bytes against %d", len(chunk.Content), len(read.Result))
	}

	latin := r.ok(t, "u1", "l1", "plain", "run", `{"command":["sh","-c","printf 'caf\\351\\n' > latin1.txt"]}`)
	if !utf8.ValidString(latin.Diff) || latin.DiffRef == "" || !strings.Contains(blob(latin.DiffRef), "+caf\xe9\n") {
		t.Fatalf("Latin-1 diff %q, ref %q", latin.Diff, latin.DiffRef)
	}
}
