package evidence

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/eventstore"
	"github.com/openrath/rath/pkg/natstest"
)

// prefix keeps at most n bytes of valid UTF-8: a rune the cut splits is
// left out, whatever its width and wherever the cut falls in it, and
// invalid bytes become U+FFFD without making it longer than n.
func TestPrefix(t *testing.T) {
	tests := []struct {
		name, text string
		n          int
		want       string
	}{
		{"shorter", "héllo", 10, "héllo"},
		{"exactly n", "abcd", 4, "abcd"},
		{"empty", "", 4, ""},
		{"no room", "abc", 0, ""},
		{"cut after a whole rune", "aé", 3, "aé"},
		{"cut in a 2-byte rune", "aéb", 2, "a"},
		{"cut after the 1st byte of a 3-byte rune", "a€b", 2, "a"},
		{"cut after the 2nd byte of a 3-byte rune", "a€b", 3, "a"},
		{"cut after the 1st byte of a 4-byte rune", "a😀b", 2, "a"},
		{"cut after the 3rd byte of a 4-byte rune", "a😀b", 4, "a"},
		{"cut right after a 4-byte rune", "a😀b", 5, "a😀"},
		{"invalid byte before the cut", "a\xffbc", 4, "a\uFFFD"},
		{"a replacement the cut would split", "a\xffbc", 3, "a"},
		{"replacements longer than n", "\xff\xfe", 2, ""},
		{"a stray continuation byte at the cut", "ab\x80\x80\x80\x80c", 6, "ab\uFFFD"},
		{"an invalid sequence at the cut is not a rune to drop", "ab\xe2\x28c", 5, "ab\uFFFD"},
		{"an uncut text ending in half a rune", "ab\xe2\x82", 10, "ab\uFFFD"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Prefix(tc.text, tc.n)
			if got != tc.want {
				t.Errorf("Prefix(%q, %d) = %q, want %q", tc.text, tc.n, got, tc.want)
			}
			if !utf8.ValidString(got) || len(got) > max(tc.n, 0) {
				t.Errorf("Prefix(%q, %d) = %q: %d bytes, valid %v", tc.text, tc.n, got, len(got), utf8.ValidString(got))
			}
		})
	}
}

type rig struct {
	c     *client.Client
	store *eventstore.Store
	rec   *Recorder
}

// setup runs a ledger on an embedded JetStream; the recorder records as
// the handler "tool-test" with the source "rath/test".
func setup(t *testing.T) *rig {
	t.Helper()
	ns, nc := natstest.Start(t)
	testrig.Ledger(t, ns.ClientURL())
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := eventstore.Open(context.Background(), nc, eventstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return &rig{c: c, store: store, rec: New(c, store, "tool-test", "rath/test")}
}

// cut is a text whose InlineLimit-th byte falls inside a rune of width w,
// after its first k bytes (0 < k < w).
func cut(w, k int) string {
	r := map[int]string{2: "é", 3: "€", 4: "😀"}[w]
	return strings.Repeat("a", InlineLimit-k) + r + strings.Repeat("z", 100)
}

// Inline keeps a valid text of at most InlineLimit bytes whole, and puts
// anything else in the blob store byte for byte, keeping in the event a
// valid UTF-8 prefix of at most InlineLimit bytes and a note; hostile
// results included.
func TestInline(t *testing.T) {
	r := setup(t)
	ctx := context.Background()
	atLimit := strings.Repeat("a", InlineLimit-3) + "€"
	tests := []struct {
		name, text string
		stored     bool   // kept whole in the blob store
		head       string // the inline text before the note
	}{
		{name: "empty"},
		{name: "exactly at the limit", text: strings.Repeat("a", InlineLimit), head: strings.Repeat("a", InlineLimit)},
		{name: "at the limit, ending in a whole rune", text: atLimit, head: atLimit},
		{name: "one byte over", text: strings.Repeat("a", InlineLimit+1), stored: true, head: strings.Repeat("a", InlineLimit)},
		{name: "cut in a 2-byte rune", text: cut(2, 1), stored: true, head: strings.Repeat("a", InlineLimit-1)},
		{name: "cut in a 3-byte rune after 1", text: cut(3, 1), stored: true, head: strings.Repeat("a", InlineLimit-1)},
		{name: "cut in a 3-byte rune after 2", text: cut(3, 2), stored: true, head: strings.Repeat("a", InlineLimit-2)},
		{name: "cut in a 4-byte rune after 3", text: cut(4, 3), stored: true, head: strings.Repeat("a", InlineLimit-3)},
		{name: "short, invalid UTF-8", text: "caf\xe9\n", stored: true, head: "caf\uFFFD\n"},
		{name: "long, invalid UTF-8", text: strings.Repeat("\xff", 3*InlineLimit), stored: true, head: "\uFFFD"},
		{name: "huge", text: strings.Repeat("0123456789abcdef", 1<<18), stored: true, head: strings.Repeat("0123456789abcdef", InlineLimit/16)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inline, ref, err := r.rec.Inline(ctx, tc.text)
			if err != nil {
				t.Fatal(err)
			}
			if !utf8.ValidString(inline) {
				t.Fatalf("inline text is not valid UTF-8: %q", inline[max(len(inline)-80, 0):])
			}
			if !tc.stored {
				if ref != "" || inline != tc.text {
					t.Fatalf("kept %d bytes and ref %q, want the text whole", len(inline), ref)
				}
				return
			}
			note := fmt.Sprintf("\n… [%d bytes in all: %s]", len(tc.text), ref)
			if ref == "" || !strings.HasSuffix(inline, note) {
				t.Fatalf("ref %q, inline ends %q; want the note %q", ref, inline[max(len(inline)-80, 0):], note)
			}
			if head := strings.TrimSuffix(inline, note); head != tc.head || len(head) > InlineLimit {
				t.Fatalf("inline head: %d bytes ending %q, want %d bytes ending %q", len(head), head[max(len(head)-8, 0):], len(tc.head), tc.head[max(len(tc.head)-8, 0):])
			}
			blob, err := r.store.GetBlob(ctx, ref)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(blob, []byte(tc.text)) {
				t.Fatalf("the blob holds %d bytes, not the text's %d", len(blob), len(tc.text))
			}
		})
	}
}

// recorded returns the events the attempt's answers to cause appended, as
// stored and decoded, by what they record.
func (r *rig) recorded(t *testing.T, session string) []any {
	t.Helper()
	log, err := r.c.Log(context.Background(), session, client.Range{From: 1, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var out []any
	for _, ev := range log {
		if ev.Source != "rath/test" {
			continue
		}
		if !utf8.Valid(ev.Data) || !json.Valid(ev.Data) {
			t.Fatalf("event %d (%s) is not valid UTF-8 JSON", ev.Seq, ev.Type)
		}
		d, err := ev.Decode()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

func (r *rig) request(t *testing.T, session, callID string) (events.Stored, *events.ToolRequested) {
	t.Helper()
	ctx := context.Background()
	if _, err := r.c.Start(ctx, session, events.SessionStarted{}); err != nil {
		t.Fatal(err)
	}
	req := &events.ToolRequested{CallID: callID, Tool: "t", Agent: "a"}
	ack, err := r.c.Emit(ctx, session, req)
	if err != nil {
		t.Fatal(err)
	}
	log, err := r.c.Log(ctx, session, client.Range{From: ack.Seq, To: ack.Seq})
	if err != nil || len(log) != 1 {
		t.Fatalf("read back the request: %v", err)
	}
	return log[0], req
}

// A completed attempt records its start, the result as a tool chunk, the
// events asked for after it, then the completion; a result cut inside a
// rune at the limit is stored as valid UTF-8 (no half rune, no U+FFFD) in
// both, a diff that is not UTF-8 keeps its bytes in the blob store, and a
// redelivered attempt records nothing new.
func TestCompleteRecordsValidUTF8(t *testing.T) {
	r := setup(t)
	ctx := context.Background()
	ev, req := r.request(t, "s1", "c1")
	result, diff := cut(3, 2), "+caf\xe9\n"
	a := r.rec.Attempt(ev, req, 1)
	for range 2 {
		if err := a.Start(ctx, &events.Sandbox{Backend: "local", SandboxID: "s1"}); err != nil {
			t.Fatal(err)
		}
		done := &events.ToolCompleted{ExitCode: 3, DurationMS: 7}
		if err := a.Complete(ctx, done, result, diff, Event{What: "verdict", Data: &events.ValidationPassed{Validator: "check", Target: "abc"}}); err != nil {
			t.Fatal(err)
		}
	}
	got := r.recorded(t, "s1")
	if len(got) != 4 {
		t.Fatalf("recorded %d events, want 4 (started, chunk, verdict, completed): %#v", len(got), got)
	}
	started, chunk, _, done := got[0].(*events.ToolStarted), got[1].(*events.ChunkAppended), got[2].(*events.ValidationPassed), got[3].(*events.ToolCompleted)
	if started.CallID != "c1" || started.Attempt != 1 || started.Sandbox == nil {
		t.Errorf("started %+v", started)
	}
	head := strings.Repeat("a", InlineLimit-2)
	if !strings.HasPrefix(done.Result, head+"\n… [") || strings.ContainsRune(done.Result, utf8.RuneError) {
		t.Errorf("completed result ends %q, want the %d a's then the note", done.Result[len(head)-4:], len(head))
	}
	if chunk.Content != done.Result || chunk.Role != events.RoleTool || chunk.ToolCallID != "c1" || chunk.Agent != "a" {
		t.Errorf("chunk %q... differs from the result", chunk.Content[:8])
	}
	if done.CallID != "c1" || done.Tool != "t" || done.Attempt != 1 || done.ExitCode != 3 || done.DurationMS != 7 {
		t.Errorf("completed %+v", done)
	}
	for ref, want := range map[string]string{done.ResultRef: result, done.DiffRef: diff} {
		blob, err := r.store.GetBlob(ctx, ref)
		if err != nil || string(blob) != want {
			t.Errorf("blob %s: %d bytes (%v), want %d", ref, len(blob), err, len(want))
		}
	}
	if !strings.HasPrefix(done.Diff, "+caf\uFFFD\n\n… [") {
		t.Errorf("completed diff %q", done.Diff)
	}
}

// A result that is not valid UTF-8 is text for the model: its invalid
// bytes become U+FFFD, in the blob store too.
func TestCompleteReplacesInvalidResultBytes(t *testing.T) {
	r := setup(t)
	ctx := context.Background()
	ev, req := r.request(t, "s1", "c1")
	if err := r.rec.Attempt(ev, req, 1).Complete(ctx, &events.ToolCompleted{}, "ok\xff", ""); err != nil {
		t.Fatal(err)
	}
	got := r.recorded(t, "s1")
	if done := got[len(got)-1].(*events.ToolCompleted); done.Result != "ok\uFFFD" || done.ResultRef != "" || done.Diff != "" || done.DiffRef != "" {
		t.Errorf("completed %+v", done)
	}
}

// A failed attempt records why as the tool's chunk and in the failure; a
// hostile reason (huge, not UTF-8) is recorded valid and bounded, not
// refused by the ledger as too large.
func TestFailRecordsABoundedReason(t *testing.T) {
	r := setup(t)
	ctx := context.Background()
	for i, tc := range []struct{ why, want string }{
		{"no such file", "no such file"},
		{"bad \xff byte", "bad \uFFFD byte"},
		{"", noReason},
		{strings.Repeat("é", 1<<20), strings.Repeat("é", InlineLimit/2) + fmt.Sprintf("\n… [%d bytes in all]", 2<<20)},
		{strings.Repeat("x", InlineLimit-1) + "€", strings.Repeat("x", InlineLimit-1) + fmt.Sprintf("\n… [%d bytes in all]", InlineLimit+2)},
	} {
		session := fmt.Sprintf("f%d", i)
		ev, req := r.request(t, session, "c1")
		if err := r.rec.Attempt(ev, req, 2).Fail(ctx, tc.why, 0, nil); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		got := r.recorded(t, session)
		if len(got) != 2 {
			t.Fatalf("%d: recorded %#v", i, got)
		}
		chunk, failed := got[0].(*events.ChunkAppended), got[1].(*events.ToolFailed)
		if failed.Error != tc.want || chunk.Content != "error: "+tc.want || failed.Attempt != 2 || failed.CallID != "c1" {
			t.Errorf("%d: failure of %d bytes, chunk of %d, attempt %d; want %d bytes", i, len(failed.Error), len(chunk.Content), failed.Attempt, len(tc.want))
		}
	}
}

// A session that closed takes no answer, and that is not an error.
func TestClosedSessionTakesNoEvidence(t *testing.T) {
	r := setup(t)
	ctx := context.Background()
	ev, req := r.request(t, "s1", "c1")
	if _, err := r.c.Close(ctx, "s1", events.SessionClosed{Outcome: "done"}); err != nil {
		t.Fatal(err)
	}
	if err := r.rec.Attempt(ev, req, 1).Complete(ctx, &events.ToolCompleted{}, "late", ""); err != nil {
		t.Fatalf("complete in a closed session: %v", err)
	}
	if got := r.recorded(t, "s1"); len(got) != 0 {
		t.Fatalf("recorded %#v in a closed session", got)
	}
}
