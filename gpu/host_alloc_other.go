//go:build !unix

package gpu

import (
	"os"
	"unsafe"
)

// allocPageLocked returns page-aligned Go memory; it cannot lock pages on
// this platform.
func allocPageLocked(n int) (mem []byte, locked bool, err error) {
	page := os.Getpagesize()
	raw := make([]byte, n+page)
	skip := (page - int(uintptr(unsafe.Pointer(&raw[0]))%uintptr(page))) % page
	return raw[skip : skip+n : skip+n], false, nil
}

func freePageLocked([]byte, bool) error { return nil }
