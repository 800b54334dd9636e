package cachesim

import (
	"math"

	"github.com/kvtier/kvtier/trace"
)

// OPT replays reqs against a clairvoyant tier of capacity blocks (capacity < 1
// means no cache). It admits and evicts like Simulate, lookup, touch every id,
// evict down to capacity, but picks victims by Belady's MIN: the resident id
// whose next use (the next request that holds it) is farthest away goes first,
// ids never used again before all others; among equal next uses the id deeper
// in its request (the later position) goes first, so a descendant leaves
// before its ancestor. Hits count the leading resident run, as everywhere.
//
// On a chained trace (CheckChained returns nil) the result is the exact
// optimum: no eviction choice under the same admission rule gets more hits.
// See the package doc for why. On other traces it is a strong clairvoyant
// heuristic, not a bound.
//
// It costs O(refs log capacity) time and O(refs) memory. Of opts, only
// BlockTokens is read (for the token counts).
func OPT(reqs []trace.Request, capacity int, opts ...Options) Result {
	capacity = max(capacity, 0)
	bt := firstBlockTokens(opts)
	var res Result
	// Compact the ids to 0..n-1 and flatten the references.
	index := make(map[int64]int32)
	starts := make([]int, len(reqs)+1)
	total := 0
	for i, r := range reqs {
		starts[i] = total
		total += len(r.HashIDs)
	}
	starts[len(reqs)] = total
	refs := make([]int32, total)
	for i, r := range reqs {
		for j, id := range r.HashIDs {
			c, ok := index[id]
			if !ok {
				c = int32(len(index))
				index[id] = c
			}
			refs[starts[i]+j] = c
		}
	}
	n := len(index)
	// next[k] is the index of the next request after the one holding
	// reference k that uses the same id, or never.
	const never = math.MaxInt32
	next := make([]int32, len(refs))
	upcoming := make([]int32, n)
	for c := range upcoming {
		upcoming[c] = never
	}
	for i := len(reqs) - 1; i >= 0; i-- {
		for k := starts[i]; k < starts[i+1]; k++ {
			next[k] = upcoming[refs[k]]
		}
		for k := starts[i]; k < starts[i+1]; k++ {
			upcoming[refs[k]] = int32(i)
		}
	}

	h := newFarthestHeap(n)
	for i := range reqs {
		span := refs[starts[i]:starts[i+1]]
		hits := 0
		for _, c := range span {
			if !h.contains(c) {
				break
			}
			hits++
		}
		res.count(&reqs[i], hits, bt)
		for j, c := range span {
			h.set(c, next[starts[i]+j], int32(j))
		}
		for h.len() > capacity {
			h.pop()
			res.Evictions++
		}
	}
	res.finish()
	return res
}
