package client_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/client"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// A batch reply whose ack refers to a signature record the reply does not
// carry is an error naming the record; an inline ack needs none; a
// malformed reference is refused as one.
func TestAttachRecord(t *testing.T) {
	ref := "k1:AAAAAAAAAAAAAAAA:0:bm9uY2U"
	a := api.Ack{Session: "s", Seq: 2, Sig: ref}
	if err := client.AttachRecord(&a, nil); err == nil || !strings.Contains(err.Error(), "AAAAAAAAAAAAAAAA") || !strings.Contains(err.Error(), "does not carry") {
		t.Fatalf("a reply without the record: %v", err)
	}
	rec := json.RawMessage(`{"key":"k1","sig":"x","leaves":[]}`)
	if err := client.AttachRecord(&a, map[string]json.RawMessage{"AAAAAAAAAAAAAAAA": rec}); err != nil || string(a.Record) != string(rec) {
		t.Fatalf("with the record: %v, record %s", err, a.Record)
	}
	inline := api.Ack{Session: "s", Seq: 2, Sig: "k1:c2ln"}
	if err := client.AttachRecord(&inline, nil); err != nil || inline.Record != nil {
		t.Fatalf("an inline ack: %v", err)
	}
	bad := api.Ack{Session: "s", Seq: 2, Sig: "k1:short:0:n"}
	if err := client.AttachRecord(&bad, nil); err == nil || !strings.Contains(err.Error(), "malformed record reference") {
		t.Fatalf("a malformed reference: %v", err)
	}
}
