package stress

import (
	"testing"

	"github.com/kvtier/kvtier"
)

// TestNoFaultNoFailure: with no fault injected anywhere, no load fails: a
// block the disk no longer holds when it is read (evicted or deleted
// since the lookup) is Evicted, and one of another prefix under its hash
// a Mismatch ("Loads say why", README). The pinned tier used to report
// every short read from the tier below as MissFailed unless a Delete it
// saw or the deadline explained it, so the GPU counted 237-281 failed
// blocks a run, and allocations saw Failed blocks, that no copy or I/O
// had: the tiers below now say why each item missed
// (messages.LowerReadDone.Why).
func TestNoFaultNoFailure(t *testing.T) {
	deadline(t)
	st := runConcurrent(t, kvtier.Config{PinnedBytes: 48 << 12, DiskDir: t.TempDir(), DiskBytes: 4096 * (8 << 10)})
	if g, d := st.Tier(kvtier.GPU), st.Tier(kvtier.Disk); g.Failed != 0 || d.Failed != 0 {
		t.Errorf("no fault was injected, yet the GPU counts %d failed blocks and the disk %d (disk misses %d, read errors %v, reads cancelled %v)", g.Failed, d.Failed, d.Misses, d.Extra["read_errors"], d.Extra["cancelled"])
	}
}
