//go:build unix

package gpu

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// allocPageLocked maps n bytes (rounded up to whole pages) of zeroed
// anonymous memory and tries to mlock it. A refused mlock (RLIMIT_MEMLOCK)
// is not an error: locked reports it.
func allocPageLocked(n int) (mem []byte, locked bool, err error) {
	page := unix.Getpagesize()
	size, ok := mulAll((n+page-1)/page, page)
	if !ok || n > size {
		return nil, false, fmt.Errorf("%w: %d bytes", ErrInvalidSize, n)
	}
	full, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, false, fmt.Errorf("kvtier: mmap %d bytes: %w", size, err)
	}
	locked = unix.Mlock(full) == nil
	return full[:n], locked, nil
}

// freePageLocked undoes allocPageLocked.
func freePageLocked(mem []byte, locked bool) error {
	full := mem[:cap(mem)]
	if locked {
		if err := unix.Munlock(full); err != nil {
			return fmt.Errorf("kvtier: munlock: %w", err)
		}
	}
	if err := unix.Munmap(full); err != nil {
		return fmt.Errorf("kvtier: munmap: %w", err)
	}
	return nil
}
