package ledger_test

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// rawAppend sends a raw request body (structured mode unless headers say
// otherwise) and returns the ledger's error, if any.
func rawAppend(t *testing.T, r *rig, hdr nats.Header, body string) (api.Ack, error) {
	t.Helper()
	msg := nats.NewMsg(events.DefaultClient.Ledger(events.OpAppend))
	for k, v := range hdr {
		msg.Header[k] = v
	}
	msg.Data = []byte(body)
	reply, err := r.nc.RequestMsg(msg, 5e9)
	if err != nil {
		t.Fatal(err)
	}
	if code := reply.Header.Get(api.HeaderError); code != "" {
		return api.Ack{}, &api.Error{Code: api.Code(code), Message: string(reply.Data)}
	}
	var a api.Ack
	if err := jsonUnmarshal(reply.Data, &a); err != nil {
		t.Fatal(err)
	}
	return a, nil
}

func TestBadInputIsRejectedRecordedAndLosesNothing(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.start(t, "good")
	r.emit(t, "good", chunk("one"))
	r.start(t, "done")
	r.emit(t, "done", &events.SessionClosed{Reason: "finished"})
	before, _ := r.c.State(ctx, "good")

	cases := []struct {
		name    string
		session string // where the rejection is recorded
		body    string
		code    api.Code
		inMsg   string
	}{
		{"not JSON", "unknown", `{"specversion":"1.0",`, api.CodeMalformed, "malformed"},
		{"missing id", "unknown", `{"specversion":"1.0","source":"t","type":"rath.conversation.chunk.appended","subject":"good","data":{"role":"user","content":"x"}}`, api.CodeMalformed, "id"},
		{"unknown type", "good", `{"specversion":"1.0","id":"u1","source":"t","type":"rath.nope","subject":"good","datacontenttype":"application/json","data":{}}`, api.CodeUnknownType, "rath.nope"},
		{"schema", "good", `{"specversion":"1.0","id":"s1","source":"t","type":"rath.conversation.chunk.appended","subject":"good","datacontenttype":"application/json","data":{"role":"robot","content":"x"}}`, api.CodeSchema, "/role"},
		{"stale sequence", "good", `{"specversion":"1.0","id":"st1","source":"t","type":"rath.conversation.chunk.appended","subject":"good","rathexpectedseq":1,"datacontenttype":"application/json","data":{"role":"user","content":"x"}}`, api.CodeStale, "expected head 1"},
		{"closed session", "done", `{"specversion":"1.0","id":"c1","source":"t","type":"rath.conversation.chunk.appended","subject":"done","datacontenttype":"application/json","data":{"role":"user","content":"x"}}`, api.CodeClosed, "closed"},
		{"missing session", "ghost", `{"specversion":"1.0","id":"m1","source":"t","type":"rath.conversation.chunk.appended","subject":"ghost","datacontenttype":"application/json","data":{"role":"user","content":"x"}}`, api.CodeNotFound, "does not exist"},
		{"started twice", "good", `{"specversion":"1.0","id":"d1","source":"t","type":"rath.session.started","subject":"good","datacontenttype":"application/json","data":{}}`, api.CodeExists, "already exists"},
		{"bad session id", "unknown", `{"specversion":"1.0","id":"b1","source":"t","type":"rath.session.started","subject":"a.b","datacontenttype":"application/json","data":{}}`, api.CodeInvalidSession, "invalid session ID"},
		{"forged fork", "good", `{"specversion":"1.0","id":"f1","source":"t","type":"rath.session.forked","subject":"good","datacontenttype":"application/json","data":{}}`, api.CodeUseOperation, "fork"},
		{"wrong dataschema", "good", `{"specversion":"1.0","id":"ds1","source":"t","type":"rath.conversation.chunk.appended","subject":"good","dataschema":"urn:other","datacontenttype":"application/json","data":{"role":"user","content":"x"}}`, api.CodeSchema, "dataschema"},
		{"too large", "good", `{"specversion":"1.0","id":"big1","source":"t","type":"rath.conversation.chunk.appended","subject":"good","datacontenttype":"application/json","data":{"role":"user","content":"` + strings.Repeat("x", 1<<20) + `"}}`, api.CodeTooLarge, "above the limit"},
		{"resume active", "good", `{"specversion":"1.0","id":"r1","source":"t","type":"rath.session.resumed","subject":"good","datacontenttype":"application/json","data":{}}`, api.CodeTransition, "not paused"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := len(r.rejections(t, tc.session))
			_, err := rawAppend(t, r, nats.Header{"Content-Type": {events.ContentTypeStructured}}, tc.body)
			wantCode(t, err, tc.code)
			if !strings.Contains(err.Error(), tc.inMsg) {
				t.Errorf("error %q does not name the problem (%q)", err, tc.inMsg)
			}
			rej := r.rejections(t, tc.session)
			if len(rej) != n+1 {
				t.Fatalf("rejections of %s: %d, want %d", tc.session, len(rej), n+1)
			}
			last := rej[len(rej)-1]
			if last.Code != string(tc.code) || last.Via != "request" || (len(last.Proposal) == 0 && last.ProposalText == "") {
				t.Errorf("recorded rejection: %+v", last)
			}
		})
	}
	after, _ := r.c.State(ctx, "good")
	if after.Seq != before.Seq || after.Hash != before.Hash {
		t.Fatalf("accepted history changed: %d/%s -> %d/%s", before.Seq, before.Hash, after.Seq, after.Hash)
	}
	r.verifyOK(t, "good")
	r.verifyOK(t, "done")
	if _, err := r.c.State(ctx, "ghost"); err == nil {
		t.Fatal("a rejected proposal created a session")
	}
}

func TestBinaryModeIsAccepted(t *testing.T) {
	r := newRig(t)
	r.start(t, "bin")
	hdr := nats.Header{
		"ce-specversion":     {"1.0"},
		"ce-id":              {"bin-1"},
		"ce-source":          {"nats-cli"},
		"ce-type":            {events.TypeChunkAppended},
		"ce-subject":         {"bin"},
		"ce-correlationid":   {"turn%201"},
		"ce-rathexpectedseq": {"1"},
		"Content-Type":       {"application/json"},
	}
	a, err := rawAppend(t, r, hdr, `{"role":"user","content":"hello from binary mode"}`)
	if err != nil {
		t.Fatal(err)
	}
	if a.Seq != 2 {
		t.Fatalf("ack %+v", a)
	}
	log, err := r.c.Log(context.Background(), "bin", client.Range{From: 2, To: 2})
	if err != nil || len(log) != 1 {
		t.Fatalf("log: %v %v", log, err)
	}
	if log[0].Correlation != "turn 1" || log[0].Source != "nats-cli" {
		t.Fatalf("stored %+v", log[0])
	}
	r.verifyOK(t, "bin")
}

func TestInboxProposalsAreDecidedInOrder(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	start, _ := events.New("inb", &events.SessionStarted{Task: "inbox"})
	if err := r.c.Propose(ctx, start); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 20; i++ {
		ev, _ := events.New("inb", chunk("n"))
		ids = append(ids, ev.ID())
		if err := r.c.Propose(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	bad, _ := events.New("inb", &events.ChunkAppended{Role: "robot", Content: "x"})
	if err := r.c.Propose(ctx, bad); err != nil {
		t.Fatal(err)
	}
	// Watch until all 21 accepted events are seen: no sleeps, the watch
	// returns as soon as they are stored.
	var got []events.Stored
	wctx, cancel := context.WithTimeout(ctx, 20e9)
	defer cancel()
	err := r.c.Watch(wctx, "inb", func(ev events.Stored) error {
		got = append(got, ev)
		if len(got) == 21 {
			return errDone
		}
		return nil
	})
	if err != errDone {
		t.Fatalf("watch: %v (saw %d)", err, len(got))
	}
	for i, id := range ids {
		if got[i+1].ID != id || got[i+1].Seq != uint64(i+2) {
			t.Fatalf("event %d: got %s seq %d, want %s", i, got[i+1].ID, got[i+1].Seq, id)
		}
	}
	// The bad proposal is recorded as a rejection once the ledger got to it.
	for deadline := 0; ; deadline++ {
		rej := r.rejections(t, "inb")
		if len(rej) == 1 && rej[0].Via == "inbox" && rej[0].Code == string(api.CodeSchema) && rej[0].EventID == bad.ID() {
			break
		}
		if deadline > 1e6 {
			t.Fatalf("inbox rejection not recorded: %+v", rej)
		}
		waitABit(r)
	}
	r.verifyOK(t, "inb")
}

// Some SDKs send JSON data base64-encoded; it must be stored as data, or
// the fold would read an empty event.
func TestBase64DataIsStoredAsData(t *testing.T) {
	r := newRig(t)
	r.start(t, "b64")
	// {"role":"user","content":"encoded"}
	body := `{"specversion":"1.0","id":"b64-1","source":"t","type":"rath.conversation.chunk.appended","subject":"b64","datacontenttype":"application/json","data_base64":"eyJyb2xlIjoidXNlciIsImNvbnRlbnQiOiJlbmNvZGVkIn0="}`
	if _, err := rawAppend(t, r, nats.Header{"Content-Type": {events.ContentTypeStructured}}, body); err != nil {
		t.Fatal(err)
	}
	st, err := r.c.State(context.Background(), "b64")
	if err != nil || len(st.Chunks) != 1 || st.Chunks[0].Content != "encoded" {
		t.Fatalf("state %+v %v", st, err)
	}
	r.verifyOK(t, "b64")
}

func TestEventIDOfAnotherSessionIsRefused(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.start(t, "one")
	r.start(t, "two")
	ev, _ := events.New("one", chunk("x"), events.WithID("shared-id"))
	if _, err := r.c.Append(ctx, ev); err != nil {
		t.Fatal(err)
	}
	other, _ := events.New("two", chunk("y"), events.WithID("shared-id"))
	_, err := r.c.Append(ctx, other)
	wantCode(t, err, api.CodeDuplicateID)
	st, _ := r.c.State(ctx, "two")
	if st.Seq != 1 {
		t.Fatalf("two: head %d", st.Seq)
	}
	// A charset parameter on the content type is fine.
	_, err = rawAppend(t, r, nats.Header{"Content-Type": {events.ContentTypeStructured}},
		`{"specversion":"1.0","id":"cs1","source":"t","type":"rath.conversation.chunk.appended","subject":"two","datacontenttype":"application/json; charset=utf-8","data":{"role":"user","content":"x"}}`)
	if err != nil {
		t.Fatal(err)
	}
}
