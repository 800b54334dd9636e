package policy

import (
	"slices"
	"testing"
)

func TestLRUVictimOrder(t *testing.T) {
	p := mustNew(t, LRU, 8)
	for k := Key(1); k <= 5; k++ {
		p.Add(k)
	}
	p.Access(2)  // 1 3 4 5 2
	p.Add(1)     // re-add is an access: 3 4 5 2 1
	p.Access(99) // unknown: ignored
	p.Remove(4)  // 3 5 2 1
	p.Remove(42) // absent: no-op
	if got := checkPolicy(t, p); !slices.Equal(got, []Key{3, 5, 2, 1}) {
		t.Fatalf("queue = %v", got)
	}
	if got, want := drain(t, p, nil), []Key{3, 5, 2, 1}; !slices.Equal(got, want) {
		t.Fatalf("victims = %v, want %v", got, want)
	}
	if p.Len() != 0 || p.Contains(1) {
		t.Fatalf("after drain: Len %d, Contains(1) %v", p.Len(), p.Contains(1))
	}
}

func TestLRUEvictableFilterKeepsPlace(t *testing.T) {
	p := mustNew(t, LRU, 8)
	for k := Key(1); k <= 5; k++ {
		p.Add(k)
	}
	pinned := map[Key]bool{1: true, 3: true}
	unpinned := func(k Key) bool { return !pinned[k] }
	if got, want := drain(t, p, unpinned), []Key{2, 4, 5}; !slices.Equal(got, want) {
		t.Fatalf("victims = %v, want %v", got, want)
	}
	if !p.Contains(1) || !p.Contains(3) || p.Len() != 2 {
		t.Fatalf("pinned keys lost: Len %d", p.Len())
	}
	// Unpinned again, they leave in their original order.
	if got, want := drain(t, p, nil), []Key{1, 3}; !slices.Equal(got, want) {
		t.Fatalf("victims = %v, want %v", got, want)
	}
}
