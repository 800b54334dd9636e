package disk

import "unsafe"

// BlockSize is the alignment and granule of every disk I/O: the header
// block, payload padding, buffer addresses and file offsets under O_DIRECT.
const BlockSize = 4096

// AlignedBuffer returns a zeroed slice of length n whose first byte sits on
// a BlockSize boundary, as O_DIRECT requires. The memory is ordinary Go
// memory (an over-allocated slice) and is freed by the garbage collector.
func AlignedBuffer(n int) []byte {
	if n < 0 {
		panic("kvtier: disk: AlignedBuffer with negative length")
	}
	raw := make([]byte, n+BlockSize)
	off := 0
	if rem := int(uintptr(unsafe.Pointer(unsafe.SliceData(raw))) & (BlockSize - 1)); rem != 0 {
		off = BlockSize - rem
	}
	return raw[off : off+n : off+n]
}

// isAligned reports whether b starts on a BlockSize boundary.
func isAligned(b []byte) bool {
	if cap(b) == 0 {
		return true
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))&(BlockSize-1) == 0
}

// roundUp rounds n up to a multiple of BlockSize.
func roundUp(n int64) int64 { return (n + BlockSize - 1) &^ (BlockSize - 1) }
