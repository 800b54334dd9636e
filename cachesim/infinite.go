package cachesim

import "github.com/kvtier/kvtier/trace"

// Infinite replays reqs against a cache that never evicts: the ideal hit ratio
// under prefix semantics. Each request hits the leading run of its ids that
// some earlier request already used. Of opts, only BlockTokens is read (for
// the token counts).
func Infinite(reqs []trace.Request, opts ...Options) Result {
	seen := make(map[int64]struct{})
	bt := firstBlockTokens(opts)
	var res Result
	for i, r := range reqs {
		res.count(&reqs[i], leadingRun(r.HashIDs, func(id int64) bool { _, ok := seen[id]; return ok }), bt)
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
