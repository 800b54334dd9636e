//go:build unix

package gpu

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// Without the up-front check, mmap's own ENOMEM comes back as
// ErrOutOfMemory too. 1<<48 bytes exceed any x86-64 or arm64 user address
// space, so it fails whatever the overcommit policy.
func TestMapAnonENOMEM(t *testing.T) {
	saved := memoryLimit
	memoryLimit = func() (uint64, bool) { return 0, false }
	t.Cleanup(func() { memoryLimit = saved })
	mem, err := mapAnon(1<<48, "test mapping")
	if !errors.Is(err, ErrOutOfMemory) || !errors.Is(err, unix.ENOMEM) || mem != nil {
		t.Fatalf("mapAnon(1<<48) = %d bytes, %v; want ErrOutOfMemory wrapping ENOMEM", len(mem), err)
	}
	t.Log(err)
}
