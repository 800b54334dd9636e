package prefixhash

import (
	"encoding/binary"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// SchemeVersion identifies the hash layout described in the package doc.
const SchemeVersion = 1

// Hash is the chained hash of one full block.
type Hash uint64

// saltDomain separates salt seeds from every other hashed input.
const saltDomain = "kvtier/cache-salt/v1\x00"

// Seed returns the chain start for a tenant salt: ok is false for the empty salt
// (the chain has no predecessor), otherwise seed stands in for the hash before the
// first block.
func Seed(salt string) (seed Hash, ok bool) {
	if salt == "" {
		return 0, false
	}
	d := xxhash.New()
	_, _ = d.WriteString(saltDomain)
	_, _ = d.WriteString(salt)
	return Hash(d.Sum64()), true
}

// Hasher hashes blocks. The zero value is ready; a Hasher is not safe for
// concurrent use.
type Hasher struct {
	d   xxhash.Digest // reset before each use
	buf []byte        // token encoding on big-endian machines
}

// Block returns the hash of one full block whose predecessor's hash is prev
// (hasPrev false for the first block of an unsalted chain).
func (h *Hasher) Block(prev Hash, hasPrev bool, tokens []int64) Hash {
	b := tokenBytes(&h.buf, tokens)
	if !hasPrev {
		return Hash(xxhash.Sum64(b))
	}
	h.d.Reset()
	var p [8]byte
	binary.LittleEndian.PutUint64(p[:], uint64(prev))
	_, _ = h.d.Write(p[:])
	_, _ = h.d.Write(b)
	return Hash(h.d.Sum64())
}

// Chain appends to dst the hashes of every full block of tokens, cut into blocks of
// blockSize tokens, for the tenant salt ("" for none). A trailing partial block gets
// no hash. blockSize must be > 0.
func (h *Hasher) Chain(dst []Hash, salt string, tokens []int64, blockSize int) []Hash {
	if blockSize <= 0 {
		panic("kvtier: prefixhash.Chain: blockSize must be > 0")
	}
	dst = slices.Grow(dst, len(tokens)/blockSize) // one allocation, not a doubling per block
	prev, hasPrev := Seed(salt)
	for off := 0; off+blockSize <= len(tokens); off += blockSize {
		prev = h.Block(prev, hasPrev, tokens[off:off+blockSize])
		hasPrev = true
		dst = append(dst, prev)
	}
	return dst
}
