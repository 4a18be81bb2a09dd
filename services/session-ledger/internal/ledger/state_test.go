package ledger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/internal/fold"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/session"
)

// TestStateOfNineLargeChunks is issue 11's case: a client appends nine
// 1 MB chunks (9 MB, above the server's 8 MiB message limit). The state
// operation answers a small overview that names each chunk's seq and size;
// each chunk reads back whole from the log; the whole state folds from the
// log and equals the ledger's own.
func TestStateOfNineLargeChunks(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.start(t, "big")
	for i := range 9 {
		r.emit(t, "big", chunk(strings.Repeat(string(rune('a'+i)), 1_000_000)))
	}
	r.emit(t, "big", usage(7, 3))

	raw, err := r.nc.Request(r.c.Principal().Ledger(events.OpState), []byte(`{"session":"big"}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if h := raw.Header.Get(api.HeaderError); h != "" {
		t.Fatalf("state answered %s: %s", h, raw.Data)
	}
	if len(raw.Data) > 16<<10 {
		t.Fatalf("state reply is %d bytes, want at most 16 KiB", len(raw.Data))
	}
	var ov session.Overview
	if err := json.Unmarshal(raw.Data, &ov); err != nil {
		t.Fatal(err)
	}
	if ov.Format != session.OverviewFormat || ov.Seq != 11 || ov.Chunks.Count != 9 || ov.Chunks.Bytes != 9_000_000 || len(ov.Chunks.Last) != session.DefaultTail {
		t.Fatalf("overview: format %q seq %d chunks %d (%d bytes, %d last)", ov.Format, ov.Seq, ov.Chunks.Count, ov.Chunks.Bytes, len(ov.Chunks.Last))
	}
	last := ov.Chunks.Last[len(ov.Chunks.Last)-1]
	if last.Seq != 10 || last.Size != 1_000_000 || !last.Clipped || last.Content != strings.Repeat("i", session.DefaultClip) {
		t.Fatalf("last chunk: seq %d size %d clipped %v content %.20q…", last.Seq, last.Size, last.Clipped, last.Content)
	}
	// The whole chunk is the event at its seq.
	page, err := r.c.Log(ctx, "big", client.Range{From: last.Seq, To: last.Seq})
	if err != nil || len(page) != 1 {
		t.Fatalf("log at %d: %d events, %v", last.Seq, len(page), err)
	}
	d, err := page[0].Decode()
	if err != nil || len(d.(*events.ChunkAppended).Content) != 1_000_000 {
		t.Fatalf("chunk at %d: %v", last.Seq, err)
	}
	// Asking for more: still bounded.
	wide, err := r.c.Overview(ctx, api.StateRequest{Session: "big", Tail: 100, Clip: 1 << 30})
	if err != nil || len(wide.Chunks.Last) != 9 || len(wide.Chunks.Last[0].Content) != session.MaxClip {
		t.Fatalf("wide overview: %v", err)
	}
	// The whole state, folded here from the log.
	full, err := r.c.State(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	want, err := r.l.State(ctx, "big", 0)
	if err != nil {
		t.Fatal(err)
	}
	sameState(t, "client.State vs the ledger's", full, want)
	if len(full.Chunks) != 9 || len(full.Chunks[8].Content) != 1_000_000 {
		t.Fatalf("folded state: %d chunks", len(full.Chunks))
	}
	// It came in parts, each within a message; a part it does not have is
	// refused.
	first, err := r.l.WholeState(ctx, "big", 0, 0)
	if err != nil || first.Parts < 2 || first.Seq != 11 {
		t.Fatalf("whole state: %d parts at %d, %v", first.Parts, first.Seq, err)
	}
	for _, part := range []int{first.Parts, first.Parts + 1_000_000} {
		_, err := r.l.WholeState(ctx, "big", first.Seq, part)
		wantCode(t, err, api.CodeOutOfRange)
	}
}

// askWhole sends a state request body as it is and returns the error code
// of the reply ("" for none) and the part it carries.
func askWhole(t *testing.T, r *rig, body string) (api.Code, api.StatePart) {
	t.Helper()
	raw, err := r.nc.Request(r.c.Principal().Ledger(events.OpState), []byte(body), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var p api.StatePart
	if code := raw.Header.Get(api.HeaderError); code != "" {
		return api.Code(code), p
	}
	if err := json.Unmarshal(raw.Data, &p); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return "", p
}

// A request for the whole state is refused where the overview is (another
// tenant's session, a sequence beyond the head, a damaged session), with
// the same words, and so are parts it does not have and options that are
// the overview's.
func TestWholeStateRefusals(t *testing.T) {
	r, acme, globex, _ := tenantsRig(t, nil)
	ctx := context.Background()
	if _, err := acme.Start(ctx, "mine", events.SessionStarted{Task: "acme's"}); err != nil {
		t.Fatal(err)
	}
	sameRefusal := func(what string, code api.Code, c *client.Client, id string, at uint64) {
		t.Helper()
		_, werr := c.StateAt(ctx, id, at)
		_, oerr := c.Overview(ctx, api.StateRequest{Session: id, At: at})
		wantCode(t, werr, code)
		if werr.Error() != oerr.Error() {
			t.Fatalf("%s: whole refused %q, the overview %q", what, werr, oerr)
		}
	}
	sameRefusal("another tenant's session", api.CodeNotFound, globex, "mine", 0)
	sameRefusal("another tenant's session, earlier", api.CodeNotFound, globex, "mine", 1)
	sameRefusal("beyond the head", api.CodeOutOfRange, acme, "mine", 2)
	sameRefusal("no such session", api.CodeNotFound, acme, "nope", 0)
	sameRefusal("a bad session ID", api.CodeInvalidSession, acme, "a.b", 0)

	r.start(t, "s")
	r.emit(t, "s", chunk("real"))
	if code, p := askWhole(t, r, `{"session":"s","whole":true}`); code != "" || p.Parts != 1 || p.Seq != 2 {
		t.Fatalf("whole state: %s %+v", code, p)
	}
	for body, want := range map[string]api.Code{
		`{"session":"s","whole":true,"part":1,"at":2}`:           api.CodeOutOfRange,
		`{"session":"s","whole":true,"part":-1,"at":2}`:          api.CodeMalformed,
		`{"session":"s","whole":true,"part":1}`:                  api.CodeMalformed, // a part after the first names its seq
		`{"session":"s","whole":true,"part":1e30,"at":2}`:        api.CodeMalformed,
		`{"session":"s","whole":true,"at":3}`:                    api.CodeOutOfRange,
		`{"session":"s","part":1,"at":2}`:                        api.CodeMalformed, // parts are of a whole state
		`{"session":"s","whole":true,"tail":5}`:                  api.CodeMalformed,
		`{"session":"s","whole":true,"tool_calls":["c1"]}`:       api.CodeMalformed,
		`{"session":"s","whole":"yes"}`:                          api.CodeMalformed,
		`{"session":"../s","whole":true}`:                        api.CodeInvalidSession,
		`{"session":"s","whole":true,"at":18446744073709551615}`: api.CodeOutOfRange,
	} {
		if code, _ := askWhole(t, r, body); code != want {
			t.Errorf("%s: answered %q, want %s", body, code, want)
		}
	}

	forge(t, r, "s", chunk("forged"), nil)
	sameRefusal("a damaged session", api.CodeDamaged, r.c, "s", 0)
	sameRefusal("a damaged session, earlier", api.CodeDamaged, r.c, "s", 1)
	if code, _ := askWhole(t, r, `{"session":"s","whole":true,"at":1}`); code != api.CodeDamaged {
		t.Fatalf("a whole state of a damaged session: %s", code)
	}
}

// TestClientStateIsTheLedgerFold: the whole state the client asks for
// (client.State) is the ledger's own (fold.Reader) and the fold of the log
// read through the ledger's log operation (fold.FromLog) at every sequence
// of sessions with forks and merges.
func TestClientStateIsTheLedgerFold(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.start(t, "s")
	for i := range 5 {
		r.emit(t, "s", chunk(fmt.Sprint("s", i)))
		r.emit(t, "s", usage(int64(i), 1))
	}
	if _, err := r.c.Fork(ctx, api.ForkRequest{Parent: "s", At: 6, ID: "f1"}); err != nil {
		t.Fatal(err)
	}
	r.emit(t, "f1", chunk("f1-a"))
	r.emit(t, "f1", usage(5, 5))
	if _, err := r.c.Fork(ctx, api.ForkRequest{Parent: "f1", At: 8, ID: "f2"}); err != nil {
		t.Fatal(err)
	}
	r.emit(t, "f2", chunk("f2-a"))
	if _, err := r.c.Merge(ctx, api.MergeRequest{Target: "s", Source: "f2"}); err != nil {
		t.Fatal(err)
	}
	r.emit(t, "f2", usage(1, 1))
	if _, err := r.c.Merge(ctx, api.MergeRequest{Target: "s", Source: "f2"}); err != nil {
		t.Fatal(err)
	}
	r.emit(t, "s", chunk("after"))
	for _, id := range []string{"s", "f1", "f2"} {
		head, err := r.l.State(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		for n := uint64(1); n <= head.Seq; n++ {
			want, err := r.l.State(ctx, id, n)
			if err != nil {
				t.Fatalf("ledger state of %s at %d: %v", id, n, err)
			}
			got, err := r.c.StateAt(ctx, id, n)
			if err != nil {
				t.Fatalf("client state of %s at %d: %v", id, n, err)
			}
			sameState(t, fmt.Sprintf("%s at %d", id, n), got, want)
			folded, err := fold.FromLog(ctx, logOf{r.c}, id, n)
			if err != nil {
				t.Fatalf("fold of %s at %d: %v", id, n, err)
			}
			sameState(t, fmt.Sprintf("%s at %d vs the fold of its log", id, n), got, folded)
		}
		if got, err := r.c.State(ctx, id); err != nil {
			t.Fatal(err)
		} else {
			sameState(t, id+" at its head", got, head)
		}
		ov, err := r.c.Overview(ctx, api.StateRequest{Session: id})
		if err != nil || ov.Seq != head.Seq || ov.Chunks.Count != len(head.Chunks) || ov.Lineage.Merges.Count != len(head.Lineage.Merges) {
			t.Fatalf("overview of %s: %+v %v", id, ov, err)
		}
	}
	_, err := r.c.StateAt(ctx, "s", 99)
	wantCode(t, err, api.CodeOutOfRange)
	_, err = r.c.Overview(ctx, api.StateRequest{Session: "s", At: 99})
	wantCode(t, err, api.CodeOutOfRange)
	_, err = r.c.State(ctx, "nope")
	wantCode(t, err, api.CodeNotFound)
	_, err = r.c.Overview(ctx, api.StateRequest{Session: "nope"})
	wantCode(t, err, api.CodeNotFound)
}

// logOf is a client as fold.FromLog reads a log.
type logOf struct{ c *client.Client }

func (l logOf) Events(ctx context.Context, id string, from, to uint64, fn func(events.Stored) error) error {
	return l.c.Events(ctx, id, client.Range{From: from, To: to}, fn)
}
