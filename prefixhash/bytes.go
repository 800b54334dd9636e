package prefixhash

import (
	"encoding/binary"
	"unsafe"
)

// littleEndian is true when int64s sit in memory as the 8-byte little-endian
// integers the schemes hash: then a block's tokens are hashed in place.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// tokenBytes returns tokens as the bytes the schemes hash (8-byte
// little-endian integers): a view of tokens' own memory on little-endian
// machines, which the hash functions only read, else an encoding into *buf.
func tokenBytes(buf *[]byte, tokens []int64) []byte {
	if len(tokens) == 0 {
		return nil
	}
	if littleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(&tokens[0])), 8*len(tokens))
	}
	n := 8 * len(tokens)
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	b := (*buf)[:n]
	for i, t := range tokens {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(t))
	}
	return b
}
