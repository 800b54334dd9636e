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

// writeStore writes records 1..n into the store at cfg and closes it.
func writeStore(t *testing.T, cfg Config, n uint64) {
	t.Helper()
	s, _ := mustOpen(t, cfg)
	for h := uint64(1); h <= n; h++ {
		mustWrite(t, s, h)
	}
	mustClose(t, s)
}

// checkStore reopens the store at cfg and checks that it holds exactly
// records 1..n, each intact.
func checkStore(t *testing.T, cfg Config, n uint64) {
	t.Helper()
	s, rep := mustOpen(t, cfg)
	if rep.Records != int(n) {
		t.Fatalf("reopened with %d records, want %d", rep.Records, n)
	}
	for h := uint64(1); h <= n; h++ {
		mustReadExact(t, s, h)
	}
	mustClose(t, s)
}

// fileSize returns the length of the file name.
func fileSize(t *testing.T, name string) int64 {
	t.Helper()
	fi, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// A store reopened with a larger capacity that the disk cannot hold (the
// second file's fallocate fails after the first file grew) is left at its
// old size: a failed Open gives back the space it took, and the records
// are all still there.
func TestFailedOpenRestoresGrownFiles(t *testing.T) {
	cfg := testConfig(t, 8)
	cfg.Files = 2
	writeStore(t, cfg, 8)
	before := []int64{fileSize(t, slotFileName(cfg.Dir, 0)), fileSize(t, slotFileName(cfg.Dir, 1))}

	big := cfg
	big.CapacityBytes *= 4
	ffs := &FaultFS{}
	ffs.Inject(Fault{Op: FaultAllocate, Err: unix.ENOSPC,
		Match: func(name string, _ int64, _ int) bool { return filepath.Base(name) == "slots-001.kv" }})
	big.FS = ffs
	_, _, err := Open(big)
	wantErr(t, err, unix.ENOSPC)
	for i, want := range before {
		if got := fileSize(t, slotFileName(cfg.Dir, i)); got != want {
			t.Errorf("after the failed Open slot file %d is %d bytes, was %d", i, got, want)
		}
	}
	checkStore(t, cfg, 8)
}

// A store reopened with a smaller capacity over more files, where a new
// file cannot be allocated, fails without having cut the old file: Open
// shrinks files only once everything else has succeeded.
func TestFailedOpenShrinksNothing(t *testing.T) {
	cfg := testConfig(t, 8)
	cfg.Files = 1
	writeStore(t, cfg, 8)
	size := fileSize(t, slotFileName(cfg.Dir, 0))

	small := cfg
	small.CapacityBytes /= 2
	small.Files = 2
	ffs := &FaultFS{}
	ffs.Inject(Fault{Op: FaultAllocate, Err: unix.ENOSPC,
		Match: func(name string, _ int64, _ int) bool { return filepath.Base(name) == "slots-001.kv" }})
	small.FS = ffs
	_, _, err := Open(small)
	wantErr(t, err, unix.ENOSPC)
	if got := fileSize(t, slotFileName(cfg.Dir, 0)); got != size {
		t.Fatalf("after the failed Open slot file 0 is %d bytes, was %d", got, size)
	}
	if left := slotFiles(t, cfg.Dir); len(left) != 1 {
		t.Fatalf("failed Open left %v, want only slot file 0", left)
	}
	checkStore(t, cfg, 8)

	// And the smaller store opens once the space is there, cut to its size.
	small.FS = nil
	s, _ := mustOpen(t, small)
	mustClose(t, s)
	if got, want := fileSize(t, slotFileName(cfg.Dir, 0)), size/4; got != want {
		t.Fatalf("the smaller store's slot file 0 is %d bytes, want %d", got, want)
	}
}
