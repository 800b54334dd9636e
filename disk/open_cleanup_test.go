package disk

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// slotFiles lists the slot files in dir.
func slotFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "slots-*.kv"))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// A fallocate that runs out of space part way (the file already grown)
// fails Open, and Open removes the slot files it created: a failed
// kvtier.New with too large a DiskBytes left a ~62 GB slots-000.kv.
func TestFailedOpenRemovesCreatedFiles(t *testing.T) {
	cfg := testConfig(t, 8)
	cfg.Files = 2
	ffs := &FaultFS{}
	ffs.Inject(Fault{Op: FaultAllocate, Err: unix.ENOSPC, Partial: 3 * BlockSize,
		Match: func(name string, _ int64, _ int) bool { return filepath.Base(name) == "slots-001.kv" }})
	cfg.FS = ffs
	_, _, err := Open(cfg)
	wantErr(t, err, unix.ENOSPC)
	if left := slotFiles(t, cfg.Dir); len(left) != 0 {
		t.Fatalf("failed Open left %v", left)
	}
}

// The same where the file system cannot preallocate and the free space is
// short (ErrInsufficientSpace): the sparse files are removed.
func TestInsufficientSpaceRemovesCreatedFiles(t *testing.T) {
	cfg := testConfig(t, 8)
	cfg.Files = 2
	cfg.FS = &FaultFS{NoFallocate: true, Space: func(string) (int64, error) { return cfg.CapacityBytes - 1, nil }}
	_, _, err := Open(cfg)
	wantErr(t, err, ErrInsufficientSpace)
	if left := slotFiles(t, cfg.Dir); len(left) != 0 {
		t.Fatalf("failed Open left %v", left)
	}
}

// A store that holds records is never removed by a failed Open, e.g. one
// reopened with a capacity the disk cannot hold.
func TestFailedOpenKeepsExistingStore(t *testing.T) {
	cfg := testConfig(t, 8)
	s, _ := mustOpen(t, cfg)
	mustWrite(t, s, 1)
	mustClose(t, s)

	big := cfg
	big.CapacityBytes *= 4
	ffs := &FaultFS{}
	ffs.Inject(Fault{Op: FaultAllocate, Err: unix.ENOSPC})
	big.FS = ffs
	_, _, err := Open(big)
	wantErr(t, err, unix.ENOSPC)
	if _, err := os.Stat(slotFileName(cfg.Dir, 0)); err != nil {
		t.Fatalf("failed Open removed the existing slot file: %v", err)
	}
	s, rep := mustOpen(t, cfg)
	if rep.Records != 1 {
		t.Fatalf("reopened with %d records, want 1", rep.Records)
	}
	mustReadExact(t, s, 1)
	mustClose(t, s)
}
