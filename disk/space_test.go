package disk

import (
	"errors"
	"testing"
)

// On a file system without fallocate the slot files would be sparse: Open
// refuses a capacity larger than the free space instead of failing writes
// with ENOSPC later.
func TestNoFallocateChecksFreeSpace(t *testing.T) {
	cfg := testConfig(t, 8)
	cfg.Files = 2
	var asked string
	ffs := &FaultFS{NoFallocate: true, Space: func(dir string) (int64, error) {
		asked = dir
		return cfg.CapacityBytes - 1, nil
	}}
	cfg.FS = ffs
	_, _, err := Open(cfg)
	wantErr(t, err, ErrInsufficientSpace)
	if asked != cfg.Dir {
		t.Fatalf("free space asked for %q, want %q", asked, cfg.Dir)
	}

	// Enough room: Open goes ahead with the sparse files.
	ffs.Space = func(string) (int64, error) { return cfg.CapacityBytes, nil }
	s, _ := mustOpen(t, cfg)
	mustWrite(t, s, 1)
	mustReadExact(t, s, 1)
	mustClose(t, s)

	// A file system that cannot say: refused with the reason.
	ffs.Space = func(string) (int64, error) { return 0, errors.New("statfs failed") }
	if _, _, err := Open(cfg); err == nil || errors.Is(err, ErrInsufficientSpace) {
		t.Fatalf("Open with no free-space answer: %v", err)
	}
}

func TestSparseErrorMatches(t *testing.T) {
	err := error(&SparseError{Name: "f", Holes: 10, Err: errors.New("eopnotsupp")})
	if !errors.Is(err, ErrNoFallocate) {
		t.Fatalf("%v does not match ErrNoFallocate", err)
	}
}

func TestOSFSReportsFreeSpace(t *testing.T) {
	free, err := OSFS{}.FreeBytes(t.TempDir())
	if err != nil || free <= 0 {
		t.Fatalf("FreeBytes: %d, %v", free, err)
	}
}
