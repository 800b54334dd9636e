//go:build unix

package pinned

import (
	"errors"
	"syscall"
	"testing"
)

// A pool the machine cannot map is a typed error, not a crash. 1<<48 bytes
// exceed any x86-64 or arm64 user address space, so mmap refuses them
// whatever the overcommit policy.
func TestNewOutOfMemory(t *testing.T) {
	p, err := New(Config{CapacityBytes: 1 << 48, SlotBytes: 1 << 24})
	if !errors.Is(err, ErrAlloc) || !errors.Is(err, syscall.ENOMEM) || errors.Is(err, ErrBadConfig) || p != nil {
		t.Fatalf("New of 1<<48 bytes = %v, %v; want ErrAlloc wrapping ENOMEM", p, err)
	}
	t.Log(err)
}
