package main

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/kvtier/kvtier/cachesim"
	"github.com/kvtier/kvtier/policy"
	"github.com/kvtier/kvtier/trace"
)

// classicPolicies are the fixed policies the trace suite compares the default
// against, in report order.
var classicPolicies = []policy.Kind{policy.LRU, policy.FIFO, policy.S3FIFO, policy.ARC}

// tracePolicies are every policy the trace suite replays: the classics, then
// the default (Adaptive).
var tracePolicies = append(append([]policy.Kind(nil), classicPolicies...), policy.Adaptive)

// optDoc says in one line what opt_hit_ratio is (see cachesim's package doc);
// optChained and optNotChained say what it is worth on the trace at hand.
const (
	optDoc        = "OPT = Belady's MIN (evict the block whose next use is farthest; descendants before ancestors)"
	optChained    = "the exact prefix-hit optimum on this chained trace: an upper bound on every policy's block hit ratio at that capacity"
	optNotChained = "the exact prefix-hit optimum, an upper bound on every policy's block hit ratio at that capacity; " +
		"this trace's ids are not chained (cachesim.CheckChained), so every column runs on its ids taken by prefix " +
		"(cachesim.PrefixIDs: a block met after another prefix is another block, as chained hashes tell them apart)"
)

// TraceResult is the trace suite's outcome.
type TraceResult struct {
	Trace       string `json:"trace"`
	BlockTokens int    `json:"block_tokens"`
	Requests    int    `json:"requests"`
	BlockRefs   int64  `json:"block_refs"`
	// Chained is true when cachesim.CheckChained accepts the trace's ids.
	// Either way every policy, OPT and Infinite run on the ids taken by
	// prefix (cachesim.PrefixIDs), as a cache keyed by chained block hashes
	// tells blocks apart: on a chained trace that only renames them, on
	// another an id met after another prefix is another block (over the raw
	// ids it counted as a hit no prefix cache has). OPT is then exact.
	Chained          bool            `json:"chained"`
	InfiniteHitRatio float64         `json:"infinite_hit_ratio"`
	Capacities       []TraceCapacity `json:"capacities"`
	// AdaptiveBytesPerID is the heap an Adaptive policy of 65,536 blocks holds
	// per id it tracks (resident or remembered), after a scan of 1M ids.
	AdaptiveBytesPerID float64 `json:"adaptive_bytes_per_id"`
}

// TraceCapacity is one tier capacity's row. Hit ratios are prefix hits over
// block references, as cachesim defines them.
type TraceCapacity struct {
	CapacityBlocks   int                `json:"capacity_blocks"`
	HitRatio         map[string]float64 `json:"hit_ratio"` // by policy name: lru, fifo, s3fifo, arc, adaptive
	OPTHitRatio      float64            `json:"opt_hit_ratio"`
	InfiniteHitRatio float64            `json:"infinite_hit_ratio"`
	// BestPolicy is the classic policy (not Adaptive) with the most hits
	// (the first in report order of those tied), "" when none hits.
	BestPolicy string `json:"best_policy"`
	// BestOverOPT and AdaptiveOverOPT are the best classic policy's and the
	// default's hit ratios over OPT's, null when OPT has no hit (0/0: no
	// policy hits either, as the ids are taken by prefix and OPT is exact).
	BestOverOPT *float64 `json:"best_over_opt"`
	// AdaptiveOverBest compares the default policy with the best classic
	// one. It is null when the best classic policy has no hit: the ratio
	// is then infinite if Adaptive hits (AdaptiveOverBestInfinite, as JSON
	// holds no Inf) and undefined if it does not either.
	AdaptiveOverOPT          *float64 `json:"adaptive_over_opt"`
	AdaptiveOverBest         *float64 `json:"adaptive_over_best"`
	AdaptiveOverBestInfinite bool     `json:"adaptive_over_best_infinite"`
	// NsPerRef is the replay time per block reference, by policy: one
	// lookup plus one Add or Access plus the evictions it causes.
	NsPerRef map[string]float64 `json:"ns_per_ref"`
}

func policyName(k policy.Kind) string { return k.String() }

// overOPT is x over OPT's hit ratio, null when OPT has no hit.
func (c *TraceCapacity) overOPT(x float64) *float64 {
	if c.OPTHitRatio <= 0 {
		return nil
	}
	r := x / c.OPTHitRatio
	return &r
}

// orNaN is *p, or NaN (printed n/a) for null.
func orNaN(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// adaptiveOverBest is AdaptiveOverBest as a number: +Inf when only Adaptive
// hits, NaN when neither it nor any classic policy does.
func (c *TraceCapacity) adaptiveOverBest() float64 {
	switch {
	case c.AdaptiveOverBest != nil:
		return *c.AdaptiveOverBest
	case c.AdaptiveOverBestInfinite:
		return math.Inf(1)
	default:
		return math.NaN()
	}
}

// traceFile is the -trace file and how to read it: the -trace-block-tokens,
// -time-unit and -skip-bad-lines flags.
type traceFile struct {
	path        string // "" means the embedded sample
	blockTokens int    // tokens per hash id
	timeUnit    time.Duration
	skipBad     bool // skip malformed lines (trace.Skip) instead of stopping at the first
}

// loadTrace reads the trace at f.path, of f.blockTokens tokens a hash id and
// timestamps in units of f.timeUnit, or returns the embedded sample (path "";
// the rest is then the sample's, Mooncake's 512 tokens and milliseconds),
// with the name results carry and the block size in force. With f.skipBad
// the name says how many lines were skipped and why the first was.
func loadTrace(f traceFile) (reqs []trace.Request, name string, tokens int, err error) {
	if f.path == "" {
		return trace.Sample(), trace.SampleName, trace.BlockTokens, nil
	}
	mode := trace.Stop
	if f.skipBad {
		mode = trace.Skip
	}
	reqs, rep, err := trace.ReadFile(f.path, trace.Options{OnError: mode, BlockTokens: f.blockTokens, TimeUnit: f.timeUnit})
	if err != nil {
		return nil, "", 0, err
	}
	name = f.path
	if rep.Skipped > 0 {
		// The first line's error says why, and often what to do (a
		// -trace-block-tokens that reads the trace's ids).
		name += fmt.Sprintf(" (%d of %d lines malformed, skipped; the first: %v)", rep.Skipped, rep.Lines, &rep.Errors[0])
	}
	return reqs, name, f.blockTokens, nil
}

func runTrace(f traceFile, capacities []int) (*TraceResult, error) {
	reqs, name, blockTokens, err := loadTrace(f)
	if err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("trace %s has no requests", name)
	}
	chained := cachesim.CheckChained(reqs) == nil
	reqs = cachesim.PrefixIDs(reqs) // see TraceResult.Chained
	inf := cachesim.Infinite(reqs)
	r := &TraceResult{
		Trace:              name,
		BlockTokens:        blockTokens,
		Requests:           inf.Requests,
		BlockRefs:          inf.BlockRefs,
		Chained:            chained,
		InfiniteHitRatio:   inf.HitRatio,
		AdaptiveBytesPerID: adaptiveBytesPerID(),
	}
	opts := cachesim.Options{BlockTokens: blockTokens}
	for _, c := range capacities {
		row := TraceCapacity{
			CapacityBlocks:   c,
			HitRatio:         make(map[string]float64, len(tracePolicies)),
			NsPerRef:         make(map[string]float64, len(tracePolicies)),
			OPTHitRatio:      cachesim.OPT(reqs, c).HitRatio,
			InfiniteHitRatio: inf.HitRatio,
		}
		best := 0.0
		for _, k := range tracePolicies {
			// Built before the clock starts: NsPerRef is the replay's cost,
			// not the policy's allocation (at 64k blocks LRU's New took as
			// long as its whole replay of the embedded sample).
			p, err := policy.New(k, c)
			if err != nil {
				return nil, fmt.Errorf("%v at %d blocks: %w", k, c, err)
			}
			start := time.Now()
			res, err := cachesim.SimulatePolicy(reqs, c, p, opts)
			if err != nil {
				return nil, fmt.Errorf("%v at %d blocks: %w", k, c, err)
			}
			row.NsPerRef[policyName(k)] = float64(time.Since(start).Nanoseconds()) / float64(max(res.BlockRefs, 1))
			row.HitRatio[policyName(k)] = res.HitRatio
			if k != policy.Adaptive && res.HitRatio > best {
				best, row.BestPolicy = res.HitRatio, policyName(k)
			}
		}
		a := row.HitRatio[policyName(policy.Adaptive)]
		row.BestOverOPT, row.AdaptiveOverOPT = row.overOPT(best), row.overOPT(a)
		if best > 0 {
			ratio := a / best
			row.AdaptiveOverBest = &ratio
		} else {
			row.AdaptiveOverBestInfinite = a > 0
		}
		r.Capacities = append(r.Capacities, row)
	}
	return r, nil
}

// adaptiveBytesPerID scans 1M distinct ids through an Adaptive policy of
// 65,536 blocks and divides the heap it holds by the ids it tracks. It does
// not depend on the trace: measured once per process (seconds, a minute
// under -race), however many trace runs report it.
var adaptiveBytesPerID = sync.OnceValue(measureAdaptiveBytesPerID)

func measureAdaptiveBytesPerID() float64 {
	const capacity, ids = 1 << 16, 1 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p, err := policy.NewAdaptive(capacity, policy.AdaptiveConfig{})
	if err != nil {
		panic("kvtier: kvbench: default adaptive config refused: " + err.Error())
	}
	for k := range policy.Key(ids) {
		p.AddHint(k, policy.Hint{Depth: int(k % 16)})
		for p.Len() > capacity {
			p.Evict(nil)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	tracked := ids // the default history bound, max(2^20, 64 x capacity) = 4M ids here, keeps them all
	bytes := float64(after.HeapAlloc) - float64(before.HeapAlloc)
	runtime.KeepAlive(p)
	return max(bytes, 1) / float64(tracked)
}
