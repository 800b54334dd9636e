package stress

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/disk"
)

// every matches one call in n, counting calls across the I/O workers.
func every(n int64, hits *atomic.Int64) func(string, int64, int) bool {
	var calls atomic.Int64
	return func(string, int64, int) bool {
		if calls.Add(1)%n == 0 {
			hits.Add(1)
			return true
		}
		return false
	}
}

// TestDiskFaults runs the concurrent load over a disk tier whose file system
// fails writes (EIO, ENOSPC, torn in the header or past it) and reads (EIO, short): the Manager keeps
// serving, failed writes are not published, failed reads become misses, and every
// block read back still carries exactly its writer's bytes.
func TestDiskFaults(t *testing.T) {
	deadline(t)
	goroutines := envInt(t, "KVTIER_STRESS_GOROUTINES", 64)
	ops := envInt(t, "KVTIER_STRESS_OPS", 100)
	ctx, cancel := context.WithTimeout(context.Background(), hangAfter)
	defer cancel()
	var eio, enospc, torn, tornPayload, readEIO, short atomic.Int64
	fs := &disk.FaultFS{NoDirect: true} // torn writes of odd lengths need buffered I/O
	fs.Inject(disk.Fault{Op: disk.FaultWrite, Err: unix.EIO, Match: every(17, &eio)})
	fs.Inject(disk.Fault{Op: disk.FaultWrite, Err: unix.ENOSPC, Match: every(23, &enospc)})
	fs.Inject(disk.Fault{Op: disk.FaultWrite, Err: unix.EIO, Partial: 1000, Match: every(29, &torn)})
	// A small block goes with its header in one write: torn past the header.
	fs.Inject(disk.Fault{Op: disk.FaultWrite, Err: unix.EIO, Partial: disk.BlockSize + 1000, Match: every(31, &tornPayload)})
	fs.Inject(disk.Fault{Op: disk.FaultRead, Err: unix.EIO, Match: every(13, &readEIO)})
	fs.Inject(disk.Fault{Op: disk.FaultRead, Err: unix.EIO, Partial: 700, Match: every(19, &short)})
	m := newManager(t, kvtier.Config{PinnedBytes: 48 << 12, DiskDir: t.TempDir(), DiskBytes: 4096 * (8 << 10), DiskFS: fs})
	defer m.Close(context.Background())
	w := &writers{}
	ws := make([]*worker, goroutines)
	for g := range ws {
		ws[g] = newWorker(m, w, g, tenants, 5)
	}
	var st kvtier.Stats
	for p := range 3 {
		name := fmt.Sprintf("disk faults phase %d", p)
		failOn(t, name, runPhase(ctx, ws, ops, randomPhase))
		c := sumCounts(ws)
		st = checkQuiescent(t, ctx, m, name, &c)
	}
	c := sumCounts(ws)
	injected := eio.Load() + enospc.Load() + torn.Load() + tornPayload.Load() + readEIO.Load() + short.Load()
	if injected == 0 || st.Tier(kvtier.Disk).Onboarded == 0 {
		t.Fatalf("faults injected %d, disk onboarded %d: the disk tier was not exercised", injected, st.Tier(kvtier.Disk).Onboarded)
	}
	if st.Tier(kvtier.Disk).Failed == 0 {
		t.Errorf("disk stats count no failure after %d injected faults: %v %v", injected, st.Tier(kvtier.Disk), st.Tier(kvtier.Disk).Extra)
	}
	t.Logf("faults: write EIO %d, ENOSPC %d, torn %d in the header and %d past it; read EIO %d, short %d; blocks verified %d (%d onboarded); disk: %v",
		eio.Load(), enospc.Load(), torn.Load(), tornPayload.Load(), readEIO.Load(), short.Load(), c.verified, c.verifiedOnboard, st.Tier(kvtier.Disk))
}
