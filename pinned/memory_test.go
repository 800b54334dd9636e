package pinned

import (
	"testing"
	"unsafe"

	"github.com/kvtier/kvtier/policy"
)

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func TestEverySlotIsPageAligned(t *testing.T) {
	for _, slotBytes := range []int{1, 100, pageSize, pageSize + 1, 3*pageSize - 7} {
		p := newPool(t, 9, slotBytes, policy.LRU)
		for k := range Key(9) {
			slot := put(t, p, k)
			b := p.Bytes(slot)
			if len(b) != slotBytes || cap(b) != slotBytes {
				t.Fatalf("slotBytes %d: slot %d len %d cap %d", slotBytes, slot, len(b), cap(b))
			}
			if addr := uintptrOf(b); addr%uintptr(pageSize) != 0 {
				t.Fatalf("slotBytes %d: slot %d at %#x is not page aligned", slotBytes, slot, addr)
			}
		}
	}
}

// Writing a distinct pattern over each whole slot leaves every other slot's
// pattern intact.
func TestSlotBytesAreIsolated(t *testing.T) {
	const n = 8
	slotBytes := pageSize + 123
	p := newPool(t, n, slotBytes, policy.FIFO)
	slots := make([]int, n)
	for k := range n {
		slots[k] = put(t, p, Key(k))
		b := p.Bytes(slots[k])
		for i := range b {
			b[i] = byte(k*31 + i)
		}
	}
	for k := range n {
		b := p.Bytes(slots[k])
		for i := range b {
			if b[i] != byte(k*31+i) {
				t.Fatalf("slot %d byte %d = %d, want %d: another slot bled into it", slots[k], i, b[i], byte(k*31+i))
			}
		}
	}
	seen := map[int]bool{}
	for _, s := range slots {
		if seen[s] {
			t.Fatalf("slot %d handed out twice", s)
		}
		seen[s] = true
	}
}

// TestHoldIsNoUse: Hold (the tier's own read, a write-through) takes a
// reference that stops eviction, as Acquire does, but counts no hit and is
// no access: under LRU the held key stays the oldest once released.
func TestHoldIsNoUse(t *testing.T) {
	p := newPool(t, 3, 64, policy.LRU)
	a := put(t, p, 1)
	put(t, p, 2)
	put(t, p, 3)
	slot, ok := p.Hold(1)
	if !ok || slot != a {
		t.Fatalf("Hold(1) = %d, %t; want slot %d", slot, ok, a)
	}
	v := p.Evict(1)
	if len(v) != 1 || v[0].Key != 2 {
		t.Fatalf("evicted %v while key 1 was held, want key 2", v)
	}
	p.Free(v[0].Slot)
	p.Release(slot)
	if st := p.Stats(); st.Hits != 0 {
		t.Fatalf("%d hits counted for a Hold", st.Hits)
	}
	if v := p.Evict(1); len(v) != 1 || v[0].Key != 1 {
		t.Fatalf("evicted %v, want key 1 (held, never used since it was put)", v)
	}
}
