package kvtier

import (
	"context"
	"testing"
)

// TestPinnedLockHasNoEffect pins what Config.PinnedLock's doc says: the
// pinned tier's memory comes from the device's AllocHost, which locks it
// (or reports that it could not) whatever PinnedLock says, and Stats reports
// the outcome in the pinned tier's Extra["locked"]. The doc used to say the
// field asked for mlock'ed memory, as if leaving it false kept the memory
// unlocked; the Manager passes pinned.DeviceAlloc, for which pinned.Config.Lock
// is ignored.
func TestPinnedLockHasNoEffect(t *testing.T) {
	ctx := context.Background()
	var locked [2]float64
	for i, lock := range []bool{false, true} {
		m := newManager(t, Config{GPUBlocks: 8, PinnedBytes: 1 << 20, PinnedLock: lock})
		st, err := m.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		v, ok := st.Tier(Pinned).Extra["locked"]
		if !ok {
			t.Fatalf("PinnedLock %v: no Extra[\"locked\"] in %v", lock, st.Tier(Pinned))
		}
		locked[i] = v
	}
	if locked[0] != locked[1] {
		t.Fatalf("locked %v with PinnedLock false, %v with true: the field had an effect", locked[0], locked[1])
	}
}
