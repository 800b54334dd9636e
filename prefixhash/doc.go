// Package prefixhash computes the chained block hashes that key kvtier's prefix
// cache.
//
// # Scheme
//
// A sequence of token ids is cut into blocks of BlockSize tokens. The hash of a full
// block is xxh64 over the previous block's hash (8 bytes, little-endian; absent for
// the first block) followed by the block's token ids, each as an 8-byte
// little-endian integer. This is byte for byte what nano-vllm's
// BlockManager.compute_hash hashes, so equal inputs give equal hashes. Because each
// hash covers its predecessor, a hash identifies its whole prefix: equal tokens
// after different prefixes hash differently. A partial (not yet full) block has no
// hash.
//
// # Tenants
//
// An optional tenant salt (vLLM's cache_salt) enters the first block: the chain then
// starts from Seed(salt) as if it were a previous block's hash, so two tenants with
// different salts never share a block. With the empty salt the hashes are the plain
// ones above.
//
// # Usage
//
//	var h prefixhash.Hasher
//	hashes := h.Chain(nil, "tenant-a", tokens, 16) // one hash per full block
//
// SchemeVersion names this layout in records that outlive the process (the disk
// tier), so a future change of scheme is detected rather than misread.
package prefixhash
