//go:build unix

package pinned

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// mmapAlloc maps bytes of anonymous, private memory (page aligned by
// construction) and tries to mlock it when lock is set.
func mmapAlloc(bytes int, lock bool) (mem []byte, locked bool, free func() error, err error) {
	mem, err = unix.Mmap(-1, 0, bytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, false, nil, fmt.Errorf("mmap %d bytes: %w", bytes, err)
	}
	if lock {
		locked = unix.Mlock(mem) == nil
	}
	free = func() error {
		// munmap also drops the lock.
		if err := unix.Munmap(mem); err != nil {
			return fmt.Errorf("munmap: %w", err)
		}
		return nil
	}
	return mem, locked, free, nil
}
