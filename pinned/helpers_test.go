package pinned

import (
	"errors"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/policy"
)

// newPool returns a pool of n slots of slotBytes each, closed at cleanup.
func newPool(t testing.TB, n, slotBytes int, kind policy.Kind) *Pool {
	t.Helper()
	stride := (slotBytes + pageSize - 1) / pageSize * pageSize
	p, err := New(Config{CapacityBytes: int64(n * stride), SlotBytes: slotBytes, Policy: kind})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if p.NumSlots() != n {
		t.Fatalf("NumSlots = %d, want %d", p.NumSlots(), n)
	}
	t.Cleanup(func() {
		// Tests that end with busy slots on purpose leave the pool open.
		if err := p.Close(); err != nil && !errors.Is(err, ErrInUse) && !errors.Is(err, ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

func mustCheck(t testing.TB, p *Pool) {
	t.Helper()
	if err := p.CheckInvariants(); err != nil {
		t.Fatalf("invariants: %v", err)
	}
}

// put reserves and commits k, failing the test on error.
func put(t testing.TB, p *Pool, k Key) int {
	t.Helper()
	slot, err := p.Reserve(k)
	if err != nil {
		t.Fatalf("Reserve(%d): %v", k, err)
	}
	p.Commit(slot)
	return slot
}

// mustPanic runs f and checks that it panics with a "kvtier: " message.
func mustPanic(t *testing.T, name string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Errorf("%s did not panic", name)
			return
		}
		if msg, ok := r.(string); !ok || !strings.HasPrefix(msg, "kvtier: ") {
			t.Errorf("%s panicked with %v, want a \"kvtier: \" message", name, r)
		}
	}()
	f()
}
