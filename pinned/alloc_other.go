//go:build !unix

package pinned

import "unsafe"

// mmapAlloc, where there is no mmap, takes page-aligned memory from the Go
// heap. It cannot lock it.
func mmapAlloc(bytes int, _ bool) (mem []byte, locked bool, free func() error, err error) {
	buf := make([]byte, bytes+pageSize)
	off := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(buf))) % uintptr(pageSize)); r != 0 {
		off = pageSize - r
	}
	return buf[off : off+bytes : off+bytes], false, nil, nil
}
