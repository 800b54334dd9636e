package stress

import (
	"os"
	"testing"

	"github.com/kvtier/kvtier"
)

// TestNoFaultNoFailure: with no fault injected anywhere, no load fails: a
// block the disk no longer holds when it is read (evicted or deleted
// since the lookup) is Evicted, and one of another prefix under its hash
// a Mismatch ("Loads say why", README). The pinned tier reports every
// short read from the tier below as MissFailed unless a Delete it saw or
// the deadline explains it (pinned/tier_lower.go, finishFetch), so the
// GPU counts failures, and allocations see Failed blocks, that no copy or
// I/O had. Known and unfixed: it runs with KVTIER_STRESS_KNOWN=1.
func TestNoFaultNoFailure(t *testing.T) {
	deadline(t)
	if os.Getenv("KVTIER_STRESS_KNOWN") != "1" {
		t.Skip("a known misreport of loads from disk; KVTIER_STRESS_KNOWN=1 runs it")
	}
	st := runConcurrent(t, kvtier.Config{PinnedBytes: 48 << 12, DiskDir: t.TempDir(), DiskBytes: 4096 * (8 << 10)})
	if g, d := st.Tier(kvtier.GPU), st.Tier(kvtier.Disk); g.Failed != 0 || d.Failed != 0 {
		t.Errorf("no fault was injected, yet the GPU counts %d failed blocks and the disk %d (disk misses %d, read errors %v, reads cancelled %v)", g.Failed, d.Failed, d.Misses, d.Extra["read_errors"], d.Extra["cancelled"])
	}
}
