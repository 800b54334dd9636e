//go:build !unix

package gpu

import (
	"fmt"
	"math"
	"os"
	"unsafe"
)

// mapAnon returns zeroed Go memory: there is no mmap on this platform, so
// a request the runtime cannot satisfy still ends the process.
func mapAnon(n int, what string) ([]byte, error) {
	if n <= 0 || n == math.MaxInt {
		return nil, fmt.Errorf("%w: %s of %d bytes", ErrInvalidSize, what, n)
	}
	return make([]byte, n), nil
}

func unmapAnon([]byte) error { return nil }

// allocPageLocked returns page-aligned Go memory; it cannot lock pages on
// this platform.
func allocPageLocked(n int) (mem []byte, locked bool, err error) {
	page := os.Getpagesize()
	if n > math.MaxInt-page {
		return nil, false, fmt.Errorf("%w: host buffer of %d bytes", ErrInvalidSize, n)
	}
	raw := make([]byte, n+page)
	skip := (page - int(uintptr(unsafe.Pointer(&raw[0]))%uintptr(page))) % page
	return raw[skip : skip+n : skip+n], false, nil
}

func freePageLocked([]byte, bool) error { return nil }
