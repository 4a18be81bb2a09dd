package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/openrath/rath/internal/dossier"
	"github.com/openrath/rath/internal/eval"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// "rath verify --help" names every field verify --json prints, for a
// session, a dossier and a receipt: a reader of "checked": 4 beside
// "signatures": 1 finds what each counts.
func TestVerifyHelpNamesEveryJSONField(t *testing.T) {
	help := ok(t, "nats://127.0.0.1:1", "verify", "--help")
	for _, v := range []any{api.Report{}, api.Fault{}, dossier.Report{}, receiptReport{}, eval.Verification{}} {
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			if !strings.Contains(help, name) {
				t.Errorf("verify --help does not name %s's JSON field %q", typ, name)
			}
		}
	}
	for _, says := range []string{"checked          events whose hash was recomputed", "signatures       signatures checked: one per segment"} {
		if !strings.Contains(help, says) {
			t.Errorf("verify --help does not say %q:\n%s", says, help)
		}
	}
}
