package main

import (
	"fmt"

	"github.com/kvtier/kvtier/cachesim"
	"github.com/kvtier/kvtier/policy"
	"github.com/kvtier/kvtier/trace"
)

// tracePolicies are the eviction policies the trace suite replays, in report order.
var tracePolicies = []policy.Kind{policy.LRU, policy.FIFO, policy.S3FIFO, policy.ARC}

// optDoc says in one line what opt_hit_ratio is (see cachesim's package doc).
const optDoc = "OPT = Belady's MIN (evict the block whose next use is farthest; descendants before ancestors), " +
	"exact prefix-hit optimum on chained traces such as Mooncake's: an upper bound for every policy at that capacity"

// TraceResult is the trace suite's outcome.
type TraceResult struct {
	Trace     string `json:"trace"`
	Requests  int    `json:"requests"`
	BlockRefs int64  `json:"block_refs"`
	// Chained is true when cachesim.CheckChained accepts the trace, so OPT is the
	// exact optimum rather than a clairvoyant heuristic.
	Chained          bool            `json:"chained"`
	InfiniteHitRatio float64         `json:"infinite_hit_ratio"`
	Capacities       []TraceCapacity `json:"capacities"`
}

// TraceCapacity is one tier capacity's row. Hit ratios are prefix hits over
// block references, as cachesim defines them.
type TraceCapacity struct {
	CapacityBlocks   int                `json:"capacity_blocks"`
	HitRatio         map[string]float64 `json:"hit_ratio"` // by policy name: lru, fifo, s3fifo
	OPTHitRatio      float64            `json:"opt_hit_ratio"`
	InfiniteHitRatio float64            `json:"infinite_hit_ratio"`
	BestPolicy       string             `json:"best_policy"`
	BestOverOPT      float64            `json:"best_over_opt"`
}

func policyName(k policy.Kind) string { return k.String() }

func runTrace(path string, capacities []int) (*TraceResult, error) {
	reqs, name := trace.Sample(), trace.SampleName
	if path != "" {
		var err error
		if reqs, _, err = trace.ReadFile(path, trace.Options{}); err != nil {
			return nil, err
		}
		name = path
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("trace %s has no requests", name)
	}
	inf := cachesim.Infinite(reqs)
	r := &TraceResult{
		Trace:            name,
		Requests:         inf.Requests,
		BlockRefs:        inf.BlockRefs,
		Chained:          cachesim.CheckChained(reqs) == nil,
		InfiniteHitRatio: inf.HitRatio,
	}
	for _, c := range capacities {
		row := TraceCapacity{
			CapacityBlocks:   c,
			HitRatio:         make(map[string]float64, len(tracePolicies)),
			OPTHitRatio:      cachesim.OPT(reqs, c).HitRatio,
			InfiniteHitRatio: inf.HitRatio,
		}
		best := -1.0
		for _, k := range tracePolicies {
			res, err := cachesim.Simulate(reqs, c, k, cachesim.Options{})
			if err != nil {
				return nil, fmt.Errorf("%v at %d blocks: %w", k, c, err)
			}
			row.HitRatio[policyName(k)] = res.HitRatio
			if res.HitRatio > best {
				best, row.BestPolicy = res.HitRatio, policyName(k)
			}
		}
		if row.OPTHitRatio > 0 {
			row.BestOverOPT = best / row.OPTHitRatio
		}
		r.Capacities = append(r.Capacities, row)
	}
	return r, nil
}
