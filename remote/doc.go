// Package remote is kvtier's shared tier on Redis (standalone or Redis
// Cluster): many nodes, one KV cache. A block is stored as chunks, each its
// own key (so a block spreads over the cluster's slots), and a commit record
// written last; a reader never assembles a partial block. Keys carry the
// block format's fingerprint, the store's own layout (record version,
// payload and chunk sizes), the namespace id and the block's 256-bit prefix
// digest, which covers tenant, model id, LoRA, layout and every token of the
// prefix: another model, tenant or layout never finds a block, so what a
// reader cannot read under its own key is damage, not a peer's block. The
// record
// carries the same and an xxh64 per chunk; anything missing, short, stale
// or corrupt is a miss (and its record is deleted, if still the one read),
// never data.
//
// Costs: a prefix lookup is one pipelined round trip (EXISTS per block); a
// write is two on a standalone server (which blocks are stored already,
// then chunks and records in order) and three on a cluster (the records
// after the chunks landed); a read is one (records and chunks, verified
// together). A block already stored is not written again. Every call is bounded by its
// context: a slow or absent server turns into Failed or an error, never a
// hang, and the client reconnects by itself when the server returns.
//
// Eviction is Redis's: give the server a maxmemory and an LRU policy, e.g.
//
//	redis-cli config set maxmemory 64gb
//	redis-cli config set maxmemory-policy allkeys-lru
//
// and a TTL here (Config.TTL, default 1h). A chunk evicted under its record
// makes that block a miss (Corrupt), cleaned up on first read.
//
// A Store is plain and synchronous; the tier's actor runs its calls on
// worker goroutines and keeps the in-flight quota.
package remote
