// Package blockpool is kvtier's paged KV-cache block manager for one device: a fixed
// set of equally sized blocks, reference counted, with chained-hash prefix caching.
//
// It has nano-vllm's semantics with vLLM's data structures. A Pool is a plain,
// single-owner type: it takes no locks and is not safe for concurrent use. In
// kvtier the GPU pool actor owns one; tests and benchmarks drive it directly.
//
// # Blocks
//
// Each block has an id, a reference count, and, once full, the chained hash of its
// tokens (package prefixhash) plus a copy of its token ids, kept to confirm a hash
// hit. A block is in exactly one state: free (in the free queue), used (held by one
// or more sequences), or reserved (set aside by Reserve).
//
// # Memory
//
// Metadata is 64 bytes a block (plus a 32-byte digest with Config.Digests). Token ids sit in a slab indexed by block id (8
// bytes a token), allocated in chunks of about 1 MiB as blocks first fill. Cached
// blocks are found through an open-addressed hash table of 8-byte slots, kept at
// most 3/8 full: 32 bytes a block when NumBlocks is a power of two and every
// block is cached, at most 43. Allocate reads ahead the table slots and free
// queue blocks it is about to update, so with a million blocks, whose metadata
// and table are far larger than the caches, their cache misses overlap.
//
// # Free queue and eviction
//
// Free blocks sit in an intrusive doubly linked list: allocation pops the head in
// O(1), and a hit on a freed block that still holds its cached contents takes it
// out of the middle in O(1) ("revival"). Deallocate releases a sequence's blocks
// tail first and appends cached blocks at the tail, so among freed cached blocks the
// least recently freed is reused first, and a sequence's tail is evicted before its
// head. Blocks with no cached contents go to the head: they are reused before any
// cached block. Reusing a cached block evicts it; the pool records each eviction
// (DrainEvicted) so its owner can offload the bytes before they are overwritten.
//
// # Sequences
//
// Allocate(seq, tokens, ns) walks the sequence's blocks: a committed full block
// whose hash and tokens match and that follows the previous hit is a hit; after
// the first miss every later block misses.
//
// # Hits are exact
//
// The 64-bit chained hash only finds a candidate. Each block also records its
// parent, the block that held the previous block of its prefix when it was
// committed (with that block's generation, bumped whenever a block's contents
// are dropped), and a chain's first block records its namespace key. A
// candidate is a hit only if its tokens equal the prompt's, and it is the
// first block of the same namespace or its parent is the previous hit,
// unchanged since. So a hit's whole prefix was compared token by token, in
// its namespace: a forged hash collision is never a hit, and no digest is
// needed for it. Tiers below the pool verify records with a
// prefixhash.Digest instead (SHA-256 over the namespace and the whole
// prefix): a pool with a tier below keeps one per block (Config.Digests), a
// pool without hashes only xxh64, four times cheaper for 512-token blocks. MayAppend and AppendTokens add tokens and cover nano-vllm's three cases:
// the last block was full (a new block is taken, or a lookahead slot used), the
// token fills the last block (it is hashed), or neither.
//
// # Commit before cache
//
// A block's life follows the engine's, not the allocator's:
//
//	state       how it gets there                  findable  offloadable  on Free
//	open        taken by Allocate/AppendTokens     no        no           discarded
//	filled      its last token appended (hashed)   no        no           discarded
//	committed   Commit covers its tokens           yes       yes          kept, revivable
//	evicted     reused from the free queue         no        (bytes gone) -
//
// Commit(seq, n) says the first n tokens hold computed KV (vLLM's
// cache_blocks(num_computed_tokens)); only then do its full blocks become hits
// for other sequences. Freeing blocks that were never committed is an abort:
// they return to the free queue's head with no contents. Recache publishes a
// filled block whose bytes arrived verified from a lower tier. Reserve/Release set blocks aside for a request
// all or nothing, as Dynamo's storage manager does; a sequence with the same id draws
// from its reservation before the free queue.
//
// # Errors
//
// Bad input returns a typed error and changes nothing: ErrEmptySequence,
// ErrSequenceExists, ErrUnknownSequence, *NoSpaceError (errors.Is ErrNoSpace, with
// the blocks needed and free), ErrTokenOutOfRange, ErrBadConfig. A reference count
// going below zero is a bug in the pool and panics with a "kvtier:" message. So
// does a block id outside [0, NumBlocks) given to the owner's calls that take one
// (Pin, Unpin, Pinned, BlockHash, BlockDigest, BlockTokens, RefCount, Uncache,
// Recache): ids come from the pool, so one out of range is the owner's bug, and
// the panic names the call, the id and the range.
//
// # Usage
//
//	p, err := blockpool.New(blockpool.Config{NumBlocks: 1024, BlockSize: 16})
//	a, err := p.Allocate(1, prompt, "")   // a.Blocks, a.CachedTokens
//	// ... compute the prompt's KV from a.CachedTokens on ...
//	_, err = p.Commit(1, len(prompt), nil)
//	err = p.MayAppend(1, nextToken)
//	err = p.Deallocate(1)
package blockpool
