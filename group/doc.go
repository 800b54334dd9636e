// Package group makes the ranks of a tensor-parallel group agree on one
// KV-cache hit.
//
// Under tensor parallelism every rank holds its own shard of each block
// (its heads), in its own kvtier.Manager. A request can use a cached prefix
// only where every rank holds its shard of it, loaded and valid: a prefix
// valid on rank 0 and recomputed on rank 1 mixes two computations and the
// attention output is wrong. This package runs AIBrix's group-aware
// protocol (GroupAwareKVCacheManager) over the public kvtier API and a
// reduction the host supplies.
//
// # Protocol
//
// Rank.Allocate, on every rank with the same prompt and the same Deadline:
//
//  1. Lookup (no side effects) gives the rank's hit; the group takes the
//     minimum before anything is loaded. A failed lookup reports -1 and the
//     group's hit is 0. Deadline does not bound it: a rank with a shared
//     tier waits for that tier's answer, up to its RemoteConfig.ReadTimeout
//     when the server is slow (then its hit leaves the shared tier out, and
//     so does the group's), and the other ranks wait in the reduction.
//  2. Each rank allocates with MaxHitTokens at that minimum and
//     LoadDeadline at the shared Deadline, and waits for its loads. A load
//     that misses the deadline or fails leaves the rank fewer valid tokens.
//  3. The group takes the minimum of the valid tokens. A rank holding more
//     frees the sequence and allocates it again capped at the minimum: its
//     extra blocks go back to its cache (still findable), fresh blocks take
//     their place for the engine to recompute into. Step 3 repeats until
//     the minimum stops falling. Every rank returns the same ValidTokens.
//     A reallocation is the same request: it is marked Again, so the
//     Manager's lookup statistics (hit and lookup tokens, hit and miss
//     blocks) keep what the first allocation found and count it once. It
//     keeps the shared Deadline, even once past: the deadline bounds the
//     request, not each try, and a fresh budget would let one rank load
//     after the instant every other rank was held to. What the rank held
//     valid went back to its GPU cache and is hit again; a block evicted
//     meanwhile is a miss at once when the deadline has passed (the
//     Manager asks no tier below for a load already late), so a late
//     reallocation starts no load that would surely be cut.
//
// A rank that cannot allocate, or whose context ends, makes every rank
// free the sequence and return ErrAborted: the request is held on all ranks
// or on none. Rank.Commit commits locally and returns what every rank
// committed: a block is stored for the group only once every rank stored
// its shard. A finished request's class (kvtier.CommitItem.Class: metadata
// for the lower tiers' eviction, no agreement needed) goes to each rank's
// own Manager with a commit of no new tokens before the rank frees the
// sequence there, the same class on every rank.
//
// # Collectives
//
// Collective is one call, AllReduceMin; back it with the serving stack's
// NCCL, gloo or gRPC communicator. Reductions are matched by a counter each
// Rank keeps, so every rank must make the same group calls in the same
// order (one goroutine per rank); a call that fails on one rank, a bad
// argument included, still takes part in its reductions, so the counters
// never drift apart. Local is the in-process implementation: one goroutine
// owns the reductions in flight, and a rank that leaves (its context ends,
// Fail) fails the reduction on every rank instead of leaving the others
// waiting.
//
// # Shared tiers
//
// RankConfig folds the rank and the group size into the Manager's ModelID,
// hence into every namespace: each rank writes and reads its own shard in
// the shared remote tier (and in its disk directory) under its own keys.
// Writing from rank 0 alone would need every shard gathered to rank 0 — a
// transfer of the KV itself across the group — and readers scattering it
// back; per-rank keys keep every write and read local and parallel, and a
// group of another size (another split of the heads) never reads them.
//
// # Stats
//
// Rank.Stats counts agreements, reductions, failures and what agreeing
// cost this rank: HitCostTokens (its lookup hit minus the group's) and
// LoadCostTokens (what it had valid minus the agreed prefix). Summarize
// gives the group's totals.
package group
