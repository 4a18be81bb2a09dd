package ledger_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Proposals the canonical form cannot hold, or of another CloudEvents
// version, are malformed: refused as such on every path in (request, batch,
// inbox), recorded, and nothing is stored.
func TestNonUnicodeAndOtherSpecVersionsAreMalformed(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.start(t, "txt")
	before, err := r.c.State(ctx, "txt")
	if err != nil {
		t.Fatal(err)
	}
	chunkWith := func(id, content string) string {
		return `{"specversion":"1.0","id":"` + id + `","source":"t","type":"rath.conversation.chunk.appended","subject":"txt","datacontenttype":"application/json","data":{"role":"user","content":"` + content + `"}}`
	}
	cases := []struct {
		name    string
		session string // where the rejection is recorded
		body    string
		inMsg   string
	}{
		{"raw invalid UTF-8 in data", "unknown", chunkWith("u1", "bad \xff byte"), "not UTF-8: byte 0xff"},
		{"raw invalid UTF-8 in an attribute", "unknown", strings.Replace(chunkWith("u2", "x"), `"source":"t"`, "\"source\":\"t\xc3\"", 1), "not UTF-8"},
		{"lone high surrogate", "unknown", chunkWith("u3", `x\ud800`), `lone surrogate \ud800`},
		{"lone high surrogate before another escape", "unknown", chunkWith("u4", `\uD800\u0041`), `lone surrogate \ud800`},
		{"lone low surrogate", "unknown", chunkWith("u5", `\udc00x`), `lone surrogate \udc00`},
		{"surrogate in the source", "unknown", strings.Replace(chunkWith("u6", "x"), `"source":"t"`, `"source":"t\ud800"`, 1), "lone surrogate"},
		{"specversion 0.3", "unknown", strings.Replace(chunkWith("v1", "x"), `"specversion":"1.0"`, `"specversion":"0.3"`, 1), `specversion "0.3" is not supported`},
		{"data twice", "unknown", strings.Replace(chunkWith("d1", "second"), `"datacontenttype"`, `"data":{"role":"user","content":"first"},"datacontenttype"`, 1), `member "data" appears twice`},
		{"data twice, escaped", "unknown", strings.Replace(chunkWith("d2", "second"), `"datacontenttype"`, `"d\u0061ta":{"role":"user","content":"first"},"datacontenttype"`, 1), `member "data" appears twice`},
		{"number beyond float64", "unknown", `{"specversion":"1.0","id":"n1","source":"t","type":"rath.tool.call.requested","subject":"txt","data":{"call_id":"c1","tool":"shell","arguments":{"n":1e400}}}`, "1e400"},
		// data_base64 is not parsed as JSON until the ledger checks the schema.
		{"number beyond float64 in data_base64", "txt", `{"specversion":"1.0","id":"n2","source":"t","type":"rath.tool.call.requested","subject":"txt","data_base64":"eyJjYWxsX2lkIjoiYzEiLCJ0b29sIjoic2hlbGwiLCJhcmd1bWVudHMiOnsibiI6MWU0MDB9fQ=="}`, "1e400"},
		{"lone surrogate in data_base64", "unknown", `{"specversion":"1.0","id":"n3","source":"t","type":"rath.conversation.chunk.appended","subject":"txt","data_base64":"eyJyb2xlIjoidXNlciIsImNvbnRlbnQiOiJcdWQ4MDAifQ=="}`, "data_base64: lone surrogate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := len(r.rejections(t, tc.session))
			_, err := rawAppend(t, r, nats.Header{"Content-Type": {events.ContentTypeStructured}}, tc.body)
			wantCode(t, err, api.CodeMalformed)
			if msg := replyMessage(t, err); !strings.Contains(msg, tc.inMsg) {
				t.Errorf("refusal %q does not name the problem (%q)", msg, tc.inMsg)
			}
			rej := r.rejections(t, tc.session)
			if len(rej) != n+1 {
				all := r.rejections(t, "")
				t.Fatalf("rejections of %s: %d, want %d; last of all: %+v", tc.session, len(rej), n+1, all[len(all)-1])
			}
			last := rej[len(rej)-1]
			if last.Code != string(api.CodeMalformed) || last.Via != "request" || !strings.Contains(last.Message, tc.inMsg) {
				t.Errorf("recorded rejection: %+v", last)
			}
			if !utf8.ValidString(tc.body) && (last.Proposal != nil || !strings.Contains(last.ProposalText, "\ufffd")) {
				t.Errorf("a proposal that is not UTF-8 is recorded as %q / %q, want text with the bad bytes replaced", last.Proposal, last.ProposalText)
			}
		})
	}

	t.Run("binary mode", func(t *testing.T) {
		hdr := nats.Header{
			"ce-specversion": {"1.0"}, "ce-id": {"b1"}, "ce-source": {"t"},
			"ce-type": {events.TypeChunkAppended}, "ce-subject": {"txt"}, "Content-Type": {"application/json"},
		}
		_, err := rawAppend(t, r, hdr, `{"role":"user","content":"\ud800"}`)
		wantCode(t, err, api.CodeMalformed)
		hdr.Set("ce-source", "t%FF")
		_, err = rawAppend(t, r, hdr, `{"role":"user","content":"x"}`)
		wantCode(t, err, api.CodeMalformed)
	})

	t.Run("batch", func(t *testing.T) {
		n := len(r.rejections(t, "unknown"))
		msg := nats.NewMsg(events.DefaultClient.Ledger(events.OpBatch))
		msg.Data = []byte("[" + chunkWith("bt1", `\ud800`) + "," + chunkWith("bt2", "fine") + "]")
		reply, err := r.nc.RequestMsg(msg, 5e9)
		if err != nil {
			t.Fatal(err)
		}
		var br api.BatchReply
		if err := jsonUnmarshal(reply.Data, &br); err != nil || len(br.Results) != 2 {
			t.Fatalf("batch reply %s: %v", reply.Data, err)
		}
		if e := br.Results[0].Error; e == nil || e.Code != api.CodeMalformed || !strings.Contains(e.Message, "lone surrogate") {
			t.Errorf("batch item 0: %+v, want malformed naming the surrogate", br.Results[0])
		}
		if br.Results[1].Ack == nil {
			t.Fatalf("batch item 1 refused: %+v", br.Results[1].Error)
		}
		rej := r.rejections(t, "unknown")
		if last := rej[len(rej)-1]; len(rej) != n+1 || last.Via != "batch" || last.Code != string(api.CodeMalformed) {
			t.Errorf("the batch refusal is not recorded: %+v", last)
		}
		before, _ = r.c.State(ctx, "txt") // the good item moved the head
	})

	t.Run("inbox", func(t *testing.T) {
		msg := nats.NewMsg(events.DefaultClient.Inbox("txt"))
		msg.Header.Set("Content-Type", events.ContentTypeStructured)
		msg.Data = []byte(strings.Replace(chunkWith("ib1", "x"), `"specversion":"1.0"`, `"specversion":"0.3"`, 1))
		if err := r.nc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
		// Poll for the rejection: it is recorded once the ledger decided.
		deadline := time.Now().Add(10 * time.Second)
		for {
			rej := r.rejections(t, "unknown")
			last := rej[len(rej)-1]
			if last.Via == "inbox" && strings.Contains(string(last.Proposal), `"ib1"`) {
				if last.Code != string(api.CodeMalformed) || !strings.Contains(last.Message, `specversion "0.3"`) {
					t.Fatalf("inbox rejection %+v", last)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("inbox rejection not recorded: %+v", last)
			}
			waitABit(r)
		}
	})

	after, err := r.c.State(ctx, "txt")
	if err != nil {
		t.Fatal(err)
	}
	if after.Seq != before.Seq || after.Hash != before.Hash {
		t.Fatalf("accepted history changed: %d/%s -> %d/%s", before.Seq, before.Hash, after.Seq, after.Hash)
	}
	r.verifyOK(t, "txt")

	// A surrogate pair is a character, and is accepted.
	a, err := rawAppend(t, r, nats.Header{"Content-Type": {events.ContentTypeStructured}}, chunkWith("ok1", `smile \ud83d\ude00`))
	if err != nil {
		t.Fatal(err)
	}
	log, err := r.c.Log(ctx, "txt", client.Range{From: a.Seq, To: a.Seq})
	if err != nil || len(log) != 1 || !strings.Contains(string(log[0].Data), "smile 😀") {
		t.Fatalf("stored pair: %v %v", log, err)
	}
	r.verifyOK(t, "txt")
}

// The ledger's own check refuses other CloudEvents versions handed to it
// in-process too.
func TestAppendRefusesSpecVersion03(t *testing.T) {
	r := newRig(t)
	r.start(t, "v03")
	ev := event.New(event.CloudEventsVersionV03)
	ev.SetID("x1")
	ev.SetSource("t")
	ev.SetType(events.TypeChunkAppended)
	ev.SetSubject("v03")
	if err := ev.SetData(event.ApplicationJSON, chunk("x")); err != nil {
		t.Fatal(err)
	}
	_, err := r.l.Append(context.Background(), ev)
	wantCode(t, err, api.CodeMalformed)
	if !strings.Contains(err.Error(), `specversion "0.3" is not supported`) {
		t.Errorf("error %q does not name the version", err)
	}
}

// replyMessage is the message of a refusal rawAppend returned.
func replyMessage(t *testing.T, err error) string {
	t.Helper()
	var er api.ErrorReply
	if jerr := jsonUnmarshal([]byte(err.(*api.Error).Message), &er); jerr != nil || er.Error == nil {
		t.Fatalf("refusal %q is not an error reply", err)
	}
	return er.Error.Message
}
