package cachesim

import (
	"fmt"

	"github.com/kvtier/kvtier/trace"
)

// Result is what one simulation run counted. Blocks are hash ids: a request's
// partial last block counts like a full one. The token counts weigh each
// block by the tokens it holds, as a serving engine counts cached tokens.
type Result struct {
	Requests  int     // requests replayed
	BlockRefs int64   // sum of len(HashIDs) over the requests
	Hits      int64   // blocks found, summed over requests (prefix semantics)
	HitRatio  float64 // Hits / BlockRefs, 0 for an empty trace
	Evictions int64   // blocks evicted to get back down to capacity
	// PromptTokens sums the requests' InputLength. HitTokens sums, per
	// request, the tokens of its hit blocks: the whole prompt when every
	// block hit, else hits x BlockTokens (Options.BlockTokens); none for a
	// request without hash ids.
	PromptTokens, HitTokens int64
	// TokenHitRatio is HitTokens / PromptTokens, 0 for no tokens. For OPT it
	// is not a bound: OPT maximises block hits.
	TokenHitRatio float64
}

// count adds one request with hits leading blocks found.
func (r *Result) count(req *trace.Request, hits, blockTokens int) {
	r.Requests++
	r.BlockRefs += int64(len(req.HashIDs))
	r.Hits += int64(hits)
	r.PromptTokens += int64(req.InputLength)
	if hits == len(req.HashIDs) && hits > 0 { // a request with no block finds no token
		r.HitTokens += int64(req.InputLength)
	} else {
		r.HitTokens += int64(min(hits*blockTokens, req.InputLength))
	}
}

func (r *Result) finish() {
	if r.BlockRefs > 0 {
		r.HitRatio = float64(r.Hits) / float64(r.BlockRefs)
	}
	if r.PromptTokens > 0 {
		r.TokenHitRatio = float64(r.HitTokens) / float64(r.PromptTokens)
	}
}

// blockTokens is o.BlockTokens, or Mooncake's 512 when unset.
func (o Options) blockTokens() int {
	if o.BlockTokens > 0 {
		return o.BlockTokens
	}
	return trace.BlockTokens
}

// firstBlockTokens is blockTokens of the first of opts (OPT's and Infinite's
// optional Options).
func firstBlockTokens(opts []Options) int {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	return o.blockTokens()
}

// String formats r as "hit 16.67% (1/6 blocks, 3 requests, 3 evictions)".
func (r Result) String() string {
	return fmt.Sprintf("hit %.2f%% (%d/%d blocks, %d requests, %d evictions)",
		100*r.HitRatio, r.Hits, r.BlockRefs, r.Requests, r.Evictions)
}
