package prefixhash

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"slices"
	"strings"
)

// Digest is the collision-resistant identity of a block and its whole prefix:
// SHA-256 over the previous block's Digest (or the namespace's seed digest for
// the first block) followed by the block's token ids as 8-byte little-endian
// integers. Equal digests mean equal namespaces and equal tokens from the first
// block on, unless SHA-256 is broken; the 64-bit Hash only finds a candidate.
type Digest [32]byte

// DigestDomain separates the seed digest from every block digest.
const digestDomain = "kvtier/prefix-digest/v1\x00"

// DigestSeed returns the digest that stands before the first block of a chain
// in namespace ns (see Namespace). Every namespace, the empty one included, has
// its own seed.
func DigestSeed(ns string) Digest {
	d := sha256.New()
	_, _ = d.Write([]byte(digestDomain))
	_, _ = d.Write([]byte(ns))
	var out Digest
	d.Sum(out[:0])
	return out
}

// Digester computes digests with reusable scratch state. The zero value is
// ready; a Digester is not safe for concurrent use.
type Digester struct {
	h   hash.Hash
	buf []byte
}

// Block returns the digest of one full block whose predecessor's digest is prev.
func (d *Digester) Block(prev Digest, tokens []int64) Digest {
	if d.h == nil {
		d.h = sha256.New()
	}
	d.h.Reset()
	_, _ = d.h.Write(prev[:])
	_, _ = d.h.Write(tokenBytes(&d.buf, tokens))
	var out Digest
	d.h.Sum(out[:0])
	return out
}

// Chain appends to dst the digests of every full block of tokens in namespace
// ns, cut into blocks of blockSize tokens. blockSize must be > 0.
func (d *Digester) Chain(dst []Digest, ns string, tokens []int64, blockSize int) []Digest {
	if blockSize <= 0 {
		panic("kvtier: prefixhash.Digester.Chain: blockSize must be > 0")
	}
	dst = slices.Grow(dst, len(tokens)/blockSize) // one allocation, not a doubling per block
	prev := DigestSeed(ns)
	for off := 0; off+blockSize <= len(tokens); off += blockSize {
		prev = d.Block(prev, tokens[off:off+blockSize])
		dst = append(dst, prev)
	}
	return dst
}

// Namespace is what a cached block belongs to besides its tokens: the tenant
// salt, the model (id and revision), the LoRA adapter and the KV layout. Blocks
// of different namespaces never match on any tier.
type Namespace struct {
	Salt   string // tenant salt (vLLM's cache_salt)
	Model  string // model id and revision, e.g. "meta-llama/Llama-3-8B@5f0b02c"
	LoRA   string // adapter name; "" for the base model
	Layout string // KV layout fingerprint (shape, dtype, block tokens)
}

// Key returns the namespace as one string for Seed and DigestSeed. The
// namespace with only a salt keys as the bare salt, so the chained Hash stays
// byte-compatible with nano-vllm (and with vLLM's cache_salt) when no model,
// LoRA or layout is named; every other namespace, and a bare salt that starts
// like the encoding, gets a length-prefixed encoding that no salt can
// imitate.
func (n Namespace) Key() string {
	if n.Model == "" && n.LoRA == "" && n.Layout == "" && !strings.HasPrefix(n.Salt, nsMagic) {
		return n.Salt
	}
	var b []byte
	b = append(b, nsMagic...)
	for _, f := range []string{n.Model, n.LoRA, n.Layout, n.Salt} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	return string(b)
}

// LoRAOf returns the LoRA adapter a namespace key (Namespace.Key) names: ""
// for the base model, a bare salt, or a key that is not one.
func LoRAOf(key string) string {
	rest, ok := strings.CutPrefix(key, nsMagic)
	if !ok {
		return ""
	}
	for i := range 2 { // the model, then the adapter
		n, w := binary.Uvarint([]byte(rest[:min(len(rest), binary.MaxVarintLen64)]))
		if w <= 0 || n > uint64(len(rest)-w) {
			return ""
		}
		if i == 1 {
			return rest[w : w+int(n)]
		}
		rest = rest[w+int(n):]
	}
	return ""
}

// nsMagic starts every encoded namespace key; a bare salt never does.
const nsMagic = "kvtier/ns/v1\x00"

// ID returns a 64-bit summary of the namespace for records and metrics (not
// for verification: the Digest covers the namespace in full).
func (n Namespace) ID() uint64 {
	s, _ := Seed(n.Key())
	return uint64(s)
}
