package pinned

import (
	"errors"
	"slices"
	"testing"

	"github.com/kvtier/kvtier/policy"
)

func TestLifecycle(t *testing.T) {
	p := newPool(t, 2, 64, policy.LRU)
	slot, err := p.Reserve(7)
	if err != nil {
		t.Fatal(err)
	}
	if p.State(slot) != StateFilling {
		t.Fatalf("after Reserve: %v", p.State(slot))
	}
	if _, ok := p.Lookup(7); ok {
		t.Fatal("a Filling key is visible to Lookup")
	}
	if _, ok := p.Acquire(7); ok {
		t.Fatal("a Filling key was acquired")
	}
	if f, ok := p.Filling(7); !ok || f != slot {
		t.Fatalf("Filling(7) = %d, %v, want %d", f, ok, slot)
	}
	copy(p.Bytes(slot), "block seven")
	p.Commit(slot)
	mustCheck(t, p)
	if _, ok := p.Filling(7); ok {
		t.Fatal("a Resident key is reported Filling")
	}

	got, ok := p.Lookup(7)
	if !ok || got != slot || p.State(slot) != StateResident {
		t.Fatalf("Lookup(7) = %d, %v in state %v", got, ok, p.State(slot))
	}
	r, ok := p.Acquire(7)
	if !ok || r != slot || string(p.Bytes(r)[:11]) != "block seven" {
		t.Fatalf("Acquire(7) = %d, %v", r, ok)
	}
	p.Release(r)

	v := p.Evict(5)
	if len(v) != 1 || v[0] != (Victim{Key: 7, Slot: slot}) || p.State(slot) != StateDraining {
		t.Fatalf("Evict = %v, state %v", v, p.State(slot))
	}
	if string(p.Bytes(slot)[:11]) != "block seven" {
		t.Fatal("draining bytes changed")
	}
	if _, ok := p.Lookup(7); ok {
		t.Fatal("a Draining key is visible to Lookup")
	}
	mustCheck(t, p)
	p.Free(slot)
	if p.State(slot) != StateFree {
		t.Fatalf("after Free: %v", p.State(slot))
	}

	slot, err = p.Reserve(8)
	if err != nil {
		t.Fatal(err)
	}
	p.Abort(slot)
	mustCheck(t, p)

	st := p.Stats()
	want := Stats{
		Slots: 2, Free: 2, SlotBytes: 64, SlotStride: pageSize, BytesMapped: int64(2 * pageSize),
		Hits: 1, Misses: 1, Evictions: 1,
	}
	if st != want {
		t.Fatalf("Stats = %+v\nwant    %+v", st, want)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestStatsCountStates(t *testing.T) {
	p := newPool(t, 6, 100, policy.FIFO)
	put(t, p, 1)
	put(t, p, 2)
	put(t, p, 3)
	if _, err := p.Reserve(4); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Acquire(2); !ok {
		t.Fatal("Acquire(2) missed")
	}
	p.Remove(2) // doomed
	p.Evict(1)  // 1 draining
	st := p.Stats()
	got := [...]int{st.Free, st.Filling, st.Resident, st.Doomed, st.Draining, st.Readers}
	if want := [...]int{2, 1, 1, 1, 1, 1}; got != want {
		t.Fatalf("free/filling/resident/doomed/draining/readers = %v, want %v", got, want)
	}
	if st.BytesUsed != 4*100 {
		t.Fatalf("BytesUsed = %d, want 400", st.BytesUsed)
	}
	mustCheck(t, p)
}

func TestReserveErrorsChangeNothing(t *testing.T) {
	p := newPool(t, 2, 64, policy.LRU)
	put(t, p, 1)
	filling, err := p.Reserve(2)
	if err != nil {
		t.Fatal(err)
	}
	before := p.Stats()
	for _, tt := range []struct {
		k    Key
		want error
	}{{1, ErrExists}, {2, ErrExists}, {3, ErrNoSpace}} {
		if slot, err := p.Reserve(tt.k); !errors.Is(err, tt.want) || slot != -1 {
			t.Errorf("Reserve(%d) = %d, %v; want -1, %v", tt.k, slot, err, tt.want)
		}
		if after := p.Stats(); after != before {
			t.Errorf("Reserve(%d) failed but changed stats: %+v -> %+v", tt.k, before, after)
		}
		mustCheck(t, p)
	}
	p.Commit(filling)
	// A full pool still reports ErrExists first for a present key.
	if _, err := p.Reserve(2); !errors.Is(err, ErrExists) {
		t.Errorf("Reserve(2) on a full pool = %v, want ErrExists", err)
	}
}

func TestReadersBlockEviction(t *testing.T) {
	p := newPool(t, 3, 64, policy.LRU)
	for k := Key(1); k <= 3; k++ {
		put(t, p, k)
	}
	s1, _ := p.Acquire(1)
	s2, _ := p.Acquire(2)
	s3, _ := p.Acquire(3)
	if v := p.Evict(3); len(v) != 0 {
		t.Fatalf("Evict with every slot read = %v", v)
	}
	if _, ok := p.EvictOne(); ok {
		t.Fatal("EvictOne evicted a slot with readers")
	}
	p.Release(s2)
	if v := p.Evict(3); len(v) != 1 || v[0].Key != 2 {
		t.Fatalf("Evict = %v, want only key 2", v)
	}
	p.Release(s1)
	p.Release(s3)
	mustCheck(t, p)
}

func TestRemoveWithReadersDooms(t *testing.T) {
	p := newPool(t, 2, 64, policy.S3FIFO)
	slot := put(t, p, 1)
	copy(p.Bytes(slot), "x")
	a, _ := p.Acquire(1)
	b, _ := p.Acquire(1)
	if !p.Remove(1) {
		t.Fatal("Remove(1) = false")
	}
	if p.State(slot) != StateDoomed || p.Bytes(slot)[0] != 'x' {
		t.Fatalf("after Remove with readers: %v", p.State(slot))
	}
	if _, ok := p.Lookup(1); ok {
		t.Fatal("doomed key still findable")
	}
	if p.Remove(1) {
		t.Fatal("second Remove(1) = true")
	}
	// The key can be stored again while the old copy is still read.
	again := put(t, p, 1)
	if again == slot {
		t.Fatal("doomed slot reused")
	}
	mustCheck(t, p)
	p.Release(a)
	if p.State(slot) != StateDoomed {
		t.Fatalf("freed before the last reader: %v", p.State(slot))
	}
	p.Release(b)
	if p.State(slot) != StateFree {
		t.Fatalf("not freed by the last reader: %v", p.State(slot))
	}
	mustCheck(t, p)

	// Without readers Remove frees at once; a Filling key is not removable.
	if !p.Remove(1) || p.State(again) != StateFree {
		t.Fatal("Remove without readers did not free")
	}
	f, _ := p.Reserve(5)
	if p.Remove(5) || p.State(f) != StateFilling {
		t.Fatal("Remove touched a Filling slot")
	}
	mustCheck(t, p)
}

// drainKeys evicts everything one by one and returns the keys in order.
func drainKeys(t *testing.T, p *Pool) []Key {
	t.Helper()
	var keys []Key
	for {
		v := p.Evict(1)
		if len(v) == 0 {
			return keys
		}
		keys = append(keys, v[0].Key)
		p.Free(v[0].Slot)
		mustCheck(t, p)
	}
}

func TestEvictOrderFollowsPolicy(t *testing.T) {
	tests := []struct {
		kind policy.Kind
		want []Key
	}{
		{policy.LRU, []Key{2, 4, 1, 3}},  // 1 and 3 were read
		{policy.FIFO, []Key{1, 2, 3, 4}}, // reads do not count
		// S3-FIFO with 4 slots: small share 1. 1 and 3 were read, so they are
		// promoted to main, and 2, then 4, leave small first.
		{policy.S3FIFO, []Key{2, 4, 1, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.kind.String(), func(t *testing.T) {
			p := newPool(t, 4, 64, tt.kind)
			for k := Key(1); k <= 4; k++ {
				put(t, p, k)
			}
			for _, k := range []Key{1, 3} {
				s, _ := p.Acquire(k)
				p.Release(s)
			}
			if got := drainKeys(t, p); !slices.Equal(got, tt.want) {
				t.Fatalf("victims = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEvictOneFrees(t *testing.T) {
	p := newPool(t, 2, 64, policy.FIFO)
	put(t, p, 1)
	put(t, p, 2)
	if k, ok := p.EvictOne(); !ok || k != 1 {
		t.Fatalf("EvictOne = %d, %v; want 1", k, ok)
	}
	if st := p.Stats(); st.Free != 1 || st.Draining != 0 || st.Evictions != 1 {
		t.Fatalf("after EvictOne: %+v", st)
	}
	if _, err := p.Reserve(3); err != nil {
		t.Fatalf("Reserve after EvictOne: %v", err)
	}
}

func TestAppendEvictReusesBuffer(t *testing.T) {
	p := newPool(t, 4, 64, policy.FIFO)
	for k := Key(1); k <= 4; k++ {
		put(t, p, k)
	}
	buf := make([]Victim, 0, 4)
	v := p.AppendEvict(buf, 3)
	if len(v) != 3 || &v[0] != &buf[:1][0] {
		t.Fatalf("AppendEvict = %v, not in the given buffer", v)
	}
	if v := p.Evict(0); len(v) != 0 {
		t.Fatalf("Evict(0) = %v", v)
	}
}

func TestContractViolationsPanic(t *testing.T) {
	p := newPool(t, 3, 64, policy.LRU)
	resident := put(t, p, 1)
	filling, _ := p.Reserve(2)
	free := 2
	if p.State(free) != StateFree {
		t.Fatalf("slot %d is %v", free, p.State(free))
	}
	cases := map[string]func(){
		"Commit resident":   func() { p.Commit(resident) },
		"Commit free":       func() { p.Commit(free) },
		"Abort resident":    func() { p.Abort(resident) },
		"Free resident":     func() { p.Free(resident) },
		"Free filling":      func() { p.Free(filling) },
		"Release unread":    func() { p.Release(resident) },
		"Release filling":   func() { p.Release(filling) },
		"Bytes free":        func() { p.Bytes(free) },
		"slot -1":           func() { p.State(-1) },
		"slot out of range": func() { p.Commit(3) },
	}
	for name, f := range cases {
		mustPanic(t, name, f)
	}
	mustCheck(t, p) // none of them changed anything

	s, _ := p.Acquire(1)
	p.Release(s)
	mustPanic(t, "double Release", func() { p.Release(s) })
}

func TestCloseRefusesWhileBusy(t *testing.T) {
	p := newPool(t, 3, 64, policy.LRU)
	put(t, p, 1)
	filling, _ := p.Reserve(2)
	if err := p.Close(); !errors.Is(err, ErrInUse) {
		t.Fatalf("Close with a Filling slot = %v, want ErrInUse", err)
	}
	p.Commit(filling)
	r, _ := p.Acquire(1)
	if err := p.Close(); !errors.Is(err, ErrInUse) {
		t.Fatalf("Close with a reader = %v, want ErrInUse", err)
	}
	p.Release(r)
	v := p.Evict(1)
	if err := p.Close(); !errors.Is(err, ErrInUse) {
		t.Fatalf("Close with a Draining slot = %v, want ErrInUse", err)
	}
	p.Free(v[0].Slot)
	if err := p.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if st := p.Stats(); st.Resident != 1 || st.Evictions != 1 {
		t.Fatalf("Stats after Close = %+v", st)
	}
	for name, f := range map[string]func(){
		"Reserve":   func() { _, _ = p.Reserve(9) },
		"Lookup":    func() { p.Lookup(2) },
		"Acquire":   func() { p.Acquire(2) },
		"Evict":     func() { p.Evict(1) },
		"Remove":    func() { p.Remove(2) },
		"Bytes":     func() { p.Bytes(0) },
		"Invariant": func() { _ = p.CheckInvariants() },
	} {
		mustPanic(t, name+" after Close", f)
	}
}

func TestDiscardWithSlotsInFlight(t *testing.T) {
	p := newPool(t, 4, 4096, policy.LRU)
	if _, err := p.Reserve(1); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); !errors.Is(err, ErrInUse) {
		t.Fatalf("Close with a filling slot: %v", err)
	}
	if err := p.Discard(); err != nil {
		t.Fatal(err)
	}
	if err := p.Discard(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Discard: %v", err)
	}
}

// TestBelowAndFetchesLiveWithTheContents: what SetBelow and CountFetch record
// belongs to a slot's contents and is gone once the slot is freed, so a new
// key in the slot starts clean (no per-key map outlives its key).
func TestBelowAndFetchesLiveWithTheContents(t *testing.T) {
	p := newPool(t, 2, 64, policy.LRU)
	s, err := p.Reserve(1)
	if err != nil {
		t.Fatal(err)
	}
	p.Commit(s)
	p.SetBelow(s, true)
	if !p.Below(s) || p.CountFetch(s) != 1 || p.CountFetch(s) != 2 {
		t.Fatal("below or fetch count not recorded")
	}
	if !p.Remove(1) {
		t.Fatal("remove")
	}
	s2, err := p.Reserve(2)
	if err != nil {
		t.Fatal(err)
	}
	if s2 != s {
		t.Fatalf("slot %d reused as %d; the test wants the same slot", s, s2)
	}
	if p.Below(s2) || p.CountFetch(s2) != 1 {
		t.Fatal("a new key inherited the old contents' record")
	}
}
