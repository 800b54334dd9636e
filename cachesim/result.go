package cachesim

import "fmt"

// Result is what one simulation run counted. Blocks are hash ids: a request's
// partial last block counts like a full one.
type Result struct {
	Requests  int     // requests replayed
	BlockRefs int64   // sum of len(HashIDs) over the requests
	Hits      int64   // blocks found, summed over requests (prefix semantics)
	HitRatio  float64 // Hits / BlockRefs, 0 for an empty trace
	Evictions int64   // blocks evicted to get back down to capacity
}

func (r *Result) finish() {
	if r.BlockRefs > 0 {
		r.HitRatio = float64(r.Hits) / float64(r.BlockRefs)
	}
}

// String formats r as "hit 16.67% (1/6 blocks, 3 requests, 3 evictions)".
func (r Result) String() string {
	return fmt.Sprintf("hit %.2f%% (%d/%d blocks, %d requests, %d evictions)",
		100*r.HitRatio, r.Hits, r.BlockRefs, r.Requests, r.Evictions)
}
