package remote

import (
	"encoding/binary"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// A block is stored as its payload cut into chunks, each its own key, and
// a commit record written after every chunk landed. The commit record is
//
//	offset  size  field
//	0       4     magic "KVTR"
//	4       2     format version (2; 1 had CRC-32C chunk sums)
//	6       2     reserved, 0
//	8       8     fingerprint: the block format (model shape, block size, hash scheme, model id)
//	16      8     namespace id (prefixhash.Namespace.ID)
//	24      32    prefix digest (SHA-256 chain over namespace and every token of the prefix)
//	56      8     chained xxh64 hash of the block
//	64      4     tokens in the block
//	68      4     chunk size in bytes
//	72      8     payload length in bytes
//	80      4     chunk count n
//	84      8*n   xxh64 of each chunk
//	84+8n   8     xxh64 of every byte above
//
// A reader takes a block only if the record parses, its checksum holds, its
// fingerprint, namespace and digest are the ones asked for, every chunk is
// present with the recorded length and checksum. Anything else is a miss.
const (
	recMagic   = "KVTR"
	recVersion = 2
	recFixed   = 84
)

// record is a commit record's content.
type record struct {
	Fingerprint uint64
	Namespace   uint64
	Digest      [32]byte
	Hash        uint64
	Tokens      uint32
	ChunkBytes  uint32
	PayloadLen  uint64
	Sums        []uint64
}

var le = binary.LittleEndian

func (r *record) encode() []byte {
	b := make([]byte, recFixed+8*len(r.Sums)+8)
	copy(b, recMagic)
	le.PutUint16(b[4:], recVersion)
	le.PutUint64(b[8:], r.Fingerprint)
	le.PutUint64(b[16:], r.Namespace)
	copy(b[24:56], r.Digest[:])
	le.PutUint64(b[56:], r.Hash)
	le.PutUint32(b[64:], r.Tokens)
	le.PutUint32(b[68:], r.ChunkBytes)
	le.PutUint64(b[72:], r.PayloadLen)
	le.PutUint32(b[80:], uint32(len(r.Sums)))
	for i, s := range r.Sums {
		le.PutUint64(b[recFixed+8*i:], s)
	}
	n := len(b) - 8
	le.PutUint64(b[n:], xxhash.Sum64(b[:n]))
	return b
}

// decodeRecord parses and checks a commit record.
func decodeRecord(b []byte) (record, error) {
	var r record
	if len(b) < recFixed+8 || string(b[:4]) != recMagic {
		return r, fmt.Errorf("%w: not a commit record (%d bytes)", ErrCorrupt, len(b))
	}
	if v := le.Uint16(b[4:]); v != recVersion {
		return r, fmt.Errorf("%w: record format version %d", ErrCorrupt, v)
	}
	n := int(le.Uint32(b[80:]))
	if n < 0 || len(b) != recFixed+8*n+8 {
		return r, fmt.Errorf("%w: record of %d bytes for %d chunks", ErrCorrupt, len(b), n)
	}
	if got, want := xxhash.Sum64(b[:len(b)-8]), le.Uint64(b[len(b)-8:]); got != want {
		return r, fmt.Errorf("%w: record checksum %016x, stored %016x", ErrCorrupt, got, want)
	}
	r.Fingerprint = le.Uint64(b[8:])
	r.Namespace = le.Uint64(b[16:])
	copy(r.Digest[:], b[24:56])
	r.Hash = le.Uint64(b[56:])
	r.Tokens = le.Uint32(b[64:])
	r.ChunkBytes = le.Uint32(b[68:])
	r.PayloadLen = le.Uint64(b[72:])
	r.Sums = make([]uint64, n)
	for i := range r.Sums {
		r.Sums[i] = le.Uint64(b[recFixed+8*i:])
	}
	if r.ChunkBytes == 0 || uint64(n) != (r.PayloadLen+uint64(r.ChunkBytes)-1)/uint64(r.ChunkBytes) {
		return r, fmt.Errorf("%w: %d chunks of %d bytes for a %d-byte payload", ErrCorrupt, n, r.ChunkBytes, r.PayloadLen)
	}
	return r, nil
}
