// Package policy holds the eviction policies shared by kvtier's host (pinned)
// and disk tiers: LRU, FIFO, S3-FIFO, ARC and Adaptive.
//
// A policy only orders keys; it owns no memory and does no I/O. The tier that
// owns the bytes tells the policy what became resident (Add), what was hit
// (Access) and what left (Remove), and asks it for a victim when it needs
// room (Evict). The tier decides how much room it needs; a policy never
// evicts on its own.
//
// # Sections
//
//   - Kinds: [Kind], [ParseKind] and [New] pick a policy by name, as in
//     AIBrix's L1 cache setting (LRU, FIFO or S3FIFO).
//   - LRU: evicts the least recently added or accessed key.
//   - FIFO: evicts the oldest key; accesses do not reorder.
//   - S3-FIFO: the three-queue policy of Yang et al. (SOSP'23): a small probation
//     FIFO, a main FIFO with second chances and a ghost FIFO that remembers keys
//     recently evicted from the small queue. It filters one-hit wonders out of
//     the main queue.
//   - ARC: Adaptive Replacement Cache (Megiddo and Modha, FAST'03): an LRU
//     list T1 for keys seen once, an LRU list T2 for keys hit again, and ghost
//     lists of recently evicted keys whose hits move the T1/T2 boundary. It
//     is the policy to pick for a prefix cache under real traffic, where most
//     blocks (the tails of prompts) are used once and would flush the reused
//     prefixes out of an LRU; see package cachesim's report for how close it
//     gets to the clairvoyant optimum.
//   - Adaptive: the default for the disk tier, and for the host tier when
//     it is the last tier (over a disk it drains to, kvtier.Config
//     defaults the host tier to LRU; see Config.PinnedPolicy). It remembers ids
//     after eviction (LRU-2 needs a block's previous use however long ago),
//     uses Hints (chain depth, partial last block, request class) when its
//     caller gives them (cachesim's replay gives all three; the tiers below
//     the GPU give the class of the request whose commit first published a
//     block, kvtier.AllocRequest.Class or the finishing commit's
//     kvtier.CommitItem.Class, with AddHint as the block lands, and
//     no depth: a block there is always full and its depth does not travel
//     with it), learns per request class
//     how often a block first seen there comes back, and picks among a
//     few rankings (AdaptiveConfig.Candidates) the one
//     whose shadow cache of the tier's size got the most prefix hits
//     lately: LRU-2-like at small sizes, close to LRU at large ones. Once
//     its choice has switched, the shadows close to the chosen one vote:
//     among the keys the chosen ranking would evict soon, the one the
//     fewest of them hold goes first.
//   - Pinned keys: Evict takes an evictable filter, so a tier can keep keys
//     that have readers; those keys are skipped and keep their place.
//
// # Concurrency
//
// Policies are plain, non-thread-safe values. One owner (the tier's actor)
// calls them; nothing here locks.
//
// # Cost
//
// Add, Access, Remove, Contains and Len are O(1). Evict is O(1) plus the number
// of keys it skips (rejected by the filter, or given a second chance by
// S3-FIFO). ARC and S3-FIFO also keep ghost keys (no data) in their index:
// ARC up to 2x capacity per ghost list, S3-FIFO up to capacity. Nodes live
// in one slice with a free list, so steady-state churn does not allocate.
// Adaptive costs more: O(log capacity) per operation in the real cache and
// in each of its nine shadows, and one entry per remembered id (at most
// max(64 × capacity, 2^20) ids); see kvbench's trace suite for the measured
// time per operation and bytes per id.
//
// # Usage
//
//	p, err := policy.New(policy.S3FIFO, numSlots)
//	if err != nil {
//		return err
//	}
//	p.Add(k)    // k was written into the tier
//	p.Access(k) // k was read
//	victim, ok := p.Evict(func(k policy.Key) bool { return refs[k] == 0 })
//	if ok {
//		// move victim to the lower tier or drop it; the policy already forgot it
//	}
package policy
