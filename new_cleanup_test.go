package kvtier

import (
	"errors"
	"path/filepath"
	"testing"

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
