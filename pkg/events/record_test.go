package events_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
)

func recordLeaves(n int) []events.Leaf {
	leaves := make([]events.Leaf, n)
	for i := range leaves {
		leaves[i] = events.Leaf{Session: fmt.Sprintf("s%d", i), Seq: uint64(3 + i), Hash: strings.Repeat(fmt.Sprintf("%x", i%16), 64)}
	}
	return leaves
}

// A signature record's references expand, with the record, to the inline
// group signatures SignRecord gave for the receipts, for every size and
// index; each verifies for its own event only, and a reference alone does
// not verify.
func TestSignatureRecords(t *testing.T) {
	ring := events.NewKeyring(testKey.Public())
	for _, n := range []int{events.MinRecord, 5, 16, 17, 33, events.MaxRecord} {
		leaves := recordLeaves(n)
		rs, err := testKey.SignRecord(leaves)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range leaves {
			ref, ok, err := events.ParseRecordRef(rs.Refs[i])
			if !ok || err != nil || ref.Record != rs.ID || ref.Index != i {
				t.Fatalf("n=%d i=%d: reference %q parses as %+v %v %v", n, i, rs.Refs[i], ref, ok, err)
			}
			if len(rs.Refs[i]) > 64 {
				t.Fatalf("n=%d: a reference of %d bytes", n, len(rs.Refs[i]))
			}
			if err := ring.Verify(l.Session, l.Seq, l.Hash, rs.Refs[i]); !errors.Is(err, events.ErrDetached) || !events.IsSignatureFault(err) {
				t.Fatalf("n=%d i=%d: a reference verified without its record: %v", n, i, err)
			}
			full, err := events.Expand(ref, rs.Record)
			if mine, merr := rs.Signed.Expand(ref); err != nil || merr != nil || full != mine {
				t.Fatalf("n=%d i=%d: expands to %q (%v), the signer's own record to %q (%v)", n, i, full, err, mine, merr)
			}
			if err := ring.Verify(l.Session, l.Seq, l.Hash, full); err != nil {
				t.Fatalf("n=%d i=%d: %v", n, i, err)
			}
			other := leaves[(i+1)%n]
			if err := ring.Verify(other.Session, other.Seq, other.Hash, full); !errors.Is(err, events.ErrBadSignature) {
				t.Fatalf("n=%d i=%d: verified for another event: %v", n, i, err)
			}
		}
	}
	if _, err := testKey.SignRecord(recordLeaves(events.MinRecord - 1)); err == nil {
		t.Error("a record of fewer than MinRecord events was signed")
	}
	if _, err := testKey.SignRecord(recordLeaves(events.MaxRecord + 1)); err == nil {
		t.Error("a record of more than MaxRecord events was signed")
	}
}

// A record that is not the one a reference names — another record, one
// with a leaf changed, added or removed, one by another key, not a record
// at all — does not expand; nor does a malformed reference parse.
func TestSignatureRecordsRefuseWhatIsNotTheirs(t *testing.T) {
	rs, err := testKey.SignRecord(recordLeaves(8))
	if err != nil {
		t.Fatal(err)
	}
	other, err := testKey.SignRecord(recordLeaves(8))
	if err != nil {
		t.Fatal(err)
	}
	ref, _, _ := events.ParseRecordRef(rs.Refs[2])
	edit := func(f func(*events.SigRecord)) []byte {
		var r events.SigRecord
		if err := json.Unmarshal(rs.Record, &r); err != nil {
			t.Fatal(err)
		}
		f(&r)
		b, _ := json.Marshal(r)
		return b
	}
	for name, rec := range map[string][]byte{
		"another record": other.Record,
		"a leaf changed": edit(func(r *events.SigRecord) { r.Leaves[2] = r.Leaves[3] }),
		"a leaf added":   edit(func(r *events.SigRecord) { r.Leaves = append(r.Leaves, r.Leaves[0]) }),
		"a leaf removed": edit(func(r *events.SigRecord) { r.Leaves = r.Leaves[:7] }),
		"another key":    edit(func(r *events.SigRecord) { r.Key = "0123456789abcdef" }),
		"too few leaves": edit(func(r *events.SigRecord) { r.Leaves = r.Leaves[:2] }),
		"not a leaf":     edit(func(r *events.SigRecord) { r.Leaves[0] = "AAAA" }),
		"not JSON":       []byte("garbage"),
	} {
		if _, err := events.Expand(ref, rec); !errors.Is(err, events.ErrBadSignature) {
			t.Errorf("%s: expanded (%v)", name, err)
		}
	}
	for _, bad := range []string{
		"k:short:0:n", "k:" + rs.ID + ":01:n", "k:" + rs.ID + ":-1:n", "k:" + rs.ID + ":64:n", "k:" + rs.ID[:15] + "*:0:n",
	} {
		if _, ok, err := events.ParseRecordRef(bad); !ok || !errors.Is(err, events.ErrBadSignature) {
			t.Errorf("%q: parsed as a reference: %v %v", bad, ok, err)
		}
	}
	for _, notRef := range []string{"", "k:sig", "k:a:b:c:d:e"} {
		if _, ok, _ := events.ParseRecordRef(notRef); ok {
			t.Errorf("%q taken for a reference", notRef)
		}
	}
}

// ReplaceSig swaps the rathsig at the end of a ledger-written body and
// nothing else; a body that does not end with the rathsig named is refused.
func TestReplaceSig(t *testing.T) {
	body := []byte(`{"a":1,"rathhash":"h","rathsig":"k:r:0:n"}`)
	out, ok := events.ReplaceSig(body, "k:r:0:n", "k:full")
	if !ok || string(out) != `{"a":1,"rathhash":"h","rathsig":"k:full"}` {
		t.Fatalf("%s %v", out, ok)
	}
	if string(body) != `{"a":1,"rathhash":"h","rathsig":"k:r:0:n"}` {
		t.Fatalf("the original changed: %s", body)
	}
	for _, b := range []string{`{"rathsig":"k:r:0:n","a":1}`, `{"rathsig":"other"}`, `"}`} {
		if _, ok := events.ReplaceSig([]byte(b), "k:r:0:n", "x"); ok {
			t.Errorf("%s: replaced", b)
		}
	}
}
