package cachesim

import "github.com/kvtier/kvtier/trace"

// Infinite replays reqs against a cache that never evicts: the ideal hit ratio
// under prefix semantics. Each request hits the leading run of its ids that
// some earlier request already used.
func Infinite(reqs []trace.Request) Result {
	seen := make(map[int64]struct{})
	var res Result
	for _, r := range reqs {
		res.Requests++
		res.BlockRefs += int64(len(r.HashIDs))
		res.Hits += int64(leadingRun(r.HashIDs, func(id int64) bool { _, ok := seen[id]; return ok }))
		for _, id := range r.HashIDs {
			seen[id] = struct{}{}
		}
	}
	res.finish()
	return res
}

// leadingRun returns how many ids, from the first, are resident.
func leadingRun(ids []int64, resident func(int64) bool) int {
	for i, id := range ids {
		if !resident(id) {
			return i
		}
	}
	return len(ids)
}
