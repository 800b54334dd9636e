package kvtier

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/kvtier/kvtier/disk"
)

// TestFailedNewRemovesSlotFiles: a New whose disk tier cannot preallocate
// (ENOSPC part way through, as with DiskBytes beyond the free space) fails
// and leaves no slot files in DiskDir.
func TestFailedNewRemovesSlotFiles(t *testing.T) {
	dir := t.TempDir()
	ffs := &disk.FaultFS{}
	ffs.Inject(disk.Fault{Op: disk.FaultAllocate, Err: unix.ENOSPC, Partial: 1 << 20})
	m, err := New(Config{GPUBlocks: 8, PinnedBytes: 1 << 20, DiskDir: dir, DiskBytes: 64 << 20, DiskFS: ffs})
	if err == nil {
		_ = m.Close(t.Context())
		t.Fatal("New succeeded with a failing fallocate")
	}
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("New: %v, want ENOSPC", err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "slots-*.kv"))
	if len(left) != 0 {
		t.Fatalf("failed New left %v", left)
	}
}

// TestFailedNewOnMetricsLeavesNoSlotFiles: a New whose Registerer refuses
// its metrics (another Manager's are there) fails before the disk tier
// opens, so it creates no slot files, and leaves the other's metrics
// registered.
func TestFailedNewOnMetricsLeavesNoSlotFiles(t *testing.T) {
	reg := prometheus.NewRegistry()
	first := newManager(t, Config{GPUBlocks: 4, Registerer: reg})
	dir := t.TempDir()
	m, err := New(Config{GPUBlocks: 8, BlockTokens: bt, PinnedBytes: 1 << 20, DiskDir: dir, DiskBytes: 4 << 20, Registerer: reg})
	if err == nil {
		_ = m.Close(t.Context())
		t.Fatal("New succeeded on a Registerer holding another Manager's metrics")
	}
	if !errors.Is(err, ErrBadConfig) {
		t.Fatalf("New: %v, want ErrBadConfig", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Fatalf("failed New left %v", left)
	}
	if _, err := first.Allocate(t.Context(), AllocRequest{Seq: 1, Tokens: toks(0, 2*bt)}); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "kvtier_tier_capacity_blocks" {
			return
		}
	}
	t.Fatal("the first Manager's tier series are gone from the registry")
}
