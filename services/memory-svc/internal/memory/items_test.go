package memory

import (
	"slices"
	"testing"

	"github.com/openrath/rath/pkg/memoryapi"
)

// Each tenant's items are ranked in its own index: another tenant's items
// never take its top k nor change its scores (which would hint at the
// terms they hold). Items of no recorded tenant are the default tenant's;
// a retraction keeps an item its tenant's; anyTenant ranks every tenant.
func TestItemsSearchByTenant(t *testing.T) {
	write := func(id, tenant, content string) memoryapi.Record {
		return memoryapi.Record{ItemID: id, Op: memoryapi.OpWrite, Version: 1, Versions: 1, Content: content, Scope: "project:x", Tenant: tenant}
	}
	alone := NewItems()
	if err := alone.Apply(write("a1", "acme", "deploy key rotates on friday"), 1); err != nil {
		t.Fatal(err)
	}
	s := NewItems()
	for i, r := range []memoryapi.Record{
		write("a1", "acme", "deploy key rotates on friday"),
		write("g1", "globex", "deploy key rotates on friday, deploy key rotates on friday"),
		write("g2", "globex", "friday"),
		write("old", "", "deploy key"),
		write("g3", "globex", "deploy key"),
		{ItemID: "g3", Op: memoryapi.OpRetract, Versions: 1, Tenant: "globex"},
	} {
		if err := s.Apply(r, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	q, f := "deploy key friday", memoryapi.Filter{}
	tests := []struct {
		tenant string
		want   []string
	}{
		{"acme", []string{"a1"}},
		{"globex", []string{"g1", "g2"}},
		{"default", []string{"old"}},
		{"initech", nil},
		{anyTenant, []string{"g1", "a1", "old", "g2"}},
	}
	for _, tc := range tests {
		if got := names(s.Search(q, f, tc.tenant, 10)); !slices.Equal(got, tc.want) {
			t.Errorf("tenant %q: %v, want %v", tc.tenant, got, tc.want)
		}
	}
	if got := names(s.Search(q, f, anyTenant, 2)); !slices.Equal(got, []string{"g1", "a1"}) {
		t.Errorf("every tenant, k 2: %v", got)
	}
	if got, want := s.Search(q, f, "acme", 1)[0].Score, alone.Search(q, f, "acme", 1)[0].Score; got != want {
		t.Errorf("acme's score %v with globex's items, %v without", got, want)
	}
	if it, _, _ := s.Get("old"); it.Tenant != "default" {
		t.Errorf("an item of no recorded tenant belongs to %q", it.Tenant)
	}
	if s.Len() != 4 {
		t.Errorf("len %d, want 4", s.Len())
	}
}
