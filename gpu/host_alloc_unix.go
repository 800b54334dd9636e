//go:build unix

package gpu

import (
	"errors"
	"fmt"
	"math"

	"golang.org/x/sys/unix"
)

// memoryLimit is the largest mapping mapAnon tries; a variable so tests
// can reach mmap's own refusal.
var memoryLimit = systemMemoryLimit

// mapAnon maps n bytes (rounded up to whole pages) of zeroed, private
// anonymous memory. what names the allocation in errors ("host arena").
// Unlike make, a refusal is an error, not a fatal runtime crash: a request
// larger than the machine's memory (RAM plus swap, where the platform
// says) fails up front, and an ENOMEM from mmap is wrapped, both as
// ErrOutOfMemory. The pages are not touched, so they cost nothing until
// used.
func mapAnon(n int, what string) ([]byte, error) {
	page := unix.Getpagesize()
	if n <= 0 || n > math.MaxInt-page {
		return nil, fmt.Errorf("%w: %s of %d bytes", ErrInvalidSize, what, n)
	}
	size := (n + page - 1) / page * page
	if limit, ok := memoryLimit(); ok && uint64(size) > limit {
		return nil, fmt.Errorf("%w: %s (%d bytes) exceeds the machine's %d bytes of RAM and swap",
			ErrOutOfMemory, what, size, limit)
	}
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if errors.Is(err, unix.ENOMEM) {
		return nil, fmt.Errorf("%w: %s: mmap of %d bytes: %w", ErrOutOfMemory, what, size, err)
	}
	if err != nil {
		return nil, fmt.Errorf("kvtier: %s: mmap of %d bytes: %w", what, size, err)
	}
	return mem[:n], nil
}

// unmapAnon undoes mapAnon (and any mlock of the pages).
func unmapAnon(mem []byte) error {
	if err := unix.Munmap(mem[:cap(mem)]); err != nil {
		return fmt.Errorf("kvtier: munmap of %d bytes: %w", cap(mem), err)
	}
	return nil
}

// allocPageLocked maps n bytes (rounded up to whole pages) of zeroed
// anonymous memory and tries to mlock it. A refused mlock (RLIMIT_MEMLOCK)
// is not an error: locked reports it.
func allocPageLocked(n int) (mem []byte, locked bool, err error) {
	mem, err = mapAnon(n, "host buffer")
	if err != nil {
		return nil, false, err
	}
	locked = unix.Mlock(mem[:cap(mem)]) == nil
	return mem, locked, nil
}

// freePageLocked undoes allocPageLocked; munmap drops the lock too.
func freePageLocked(mem []byte, _ bool) error { return unmapAnon(mem) }
