package policy

import (
	"slices"
	"testing"
)

func TestFIFOVictimOrder(t *testing.T) {
	p := mustNew(t, FIFO, 8)
	for k := Key(1); k <= 5; k++ {
		p.Add(k)
	}
	p.Access(1) // no reordering
	p.Add(2)    // already resident: no reordering
	p.Remove(3)
	p.Add(3) // re-inserted: now newest
	if got, want := drain(t, p, nil), []Key{1, 2, 4, 5, 3}; !slices.Equal(got, want) {
		t.Fatalf("victims = %v, want %v", got, want)
	}
}

func TestFIFOEvictableFilter(t *testing.T) {
	p := mustNew(t, FIFO, 8)
	for k := Key(1); k <= 4; k++ {
		p.Add(k)
	}
	none := func(Key) bool { return false }
	if k, ok := p.Evict(none); ok {
		t.Fatalf("Evict(none) = %d, true", k)
	}
	if p.Len() != 4 {
		t.Fatalf("failed Evict changed Len to %d", p.Len())
	}
	odd := func(k Key) bool { return k%2 == 1 }
	if got, want := drain(t, p, odd), []Key{1, 3}; !slices.Equal(got, want) {
		t.Fatalf("victims = %v, want %v", got, want)
	}
	if got, want := drain(t, p, nil), []Key{2, 4}; !slices.Equal(got, want) {
		t.Fatalf("victims = %v, want %v", got, want)
	}
}
