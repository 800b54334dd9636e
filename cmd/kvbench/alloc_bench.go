package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/kvtier/kvtier/blockpool"
)

// Pool sizes of the alloc suite. poolBlocks is the pool of the headline direct
// and actor runs (16k blocks of 2 MiB is a 32 GiB KV cache); the other two give
// the cost per block at the small and large end.
const (
	poolBlocks      = 16 << 10
	smallPoolBlocks = 1 << 10
	largePoolBlocks = 1 << 20
	// directLive is how many sequences the direct run holds at once: each step
	// allocates a new one and frees the oldest.
	directLive = 4
)

// AllocResult is the alloc suite's outcome. The figures are timed three ways:
// the direct core at BlockTokens (DirectBlocksPerS, NsPerBlock1k,
// NsPerBlock1m) is the median of DirectRounds rounds of DirectSeqsPerRound
// sequences that interleave the three pool sizes; the direct core at
// LongBlockTokens is the median of LongDirectRounds rounds of
// LongDirectSeqsPerRound; every actor figure is one run of ActorWindowS
// seconds, its blocks over its elapsed time.
type AllocResult struct {
	SeqBlocks   int `json:"seq_blocks"`
	BlockTokens int `json:"block_tokens"`
	StemBlocks  int `json:"shared_stem_blocks"`
	Stems       int `json:"distinct_stems"`
	PoolBlocks  int `json:"pool_blocks"` // pool of direct_blocks_per_s and the actor runs

	DirectRounds           int     `json:"direct_rounds"`
	DirectSeqsPerRound     int     `json:"direct_seqs_per_round"`
	LongDirectRounds       int     `json:"long_direct_rounds"`
	LongDirectSeqsPerRound int     `json:"long_direct_seqs_per_round"`
	ActorWindowS           float64 `json:"actor_window_s"` // 0 when the actor path is not built
	// HitFraction is the share of allocated blocks served as prefix hits in the
	// direct run (the stems): stemBlocks/seqBlocks when the stems stay cached.
	HitFraction       float64 `json:"hit_fraction"`
	DirectBlocksPerS  float64 `json:"direct_blocks_per_s"`
	NsPerBlock1k      float64 `json:"ns_per_block_1k"`
	NsPerBlock1m      float64 `json:"ns_per_block_1m"`
	EvictionsPerBlock float64 `json:"evictions_per_block"` // direct run: pool kept warm

	ActorBuilt              bool    `json:"actor_built"`
	ActorBatch              int     `json:"actor_batch"`
	ActorClients            int     `json:"actor_parallel_clients"`
	ActorBlocksPerS         float64 `json:"actor_blocks_per_s"`
	ActorParallelBlocksPerS float64 `json:"actor_parallel_blocks_per_s"`
	ActorOverDirectCost     float64 `json:"actor_over_direct_cost"`

	// The same direct and one-client actor runs at LongBlockTokens tokens a
	// block, where hashing and checking the tokens dominate.
	LongBlockTokens         int     `json:"long_block_tokens"`
	LongDirectBlocksPerS    float64 `json:"long_direct_blocks_per_s"`
	LongActorBlocksPerS     float64 `json:"long_actor_blocks_per_s"`
	LongActorOverDirectCost float64 `json:"long_actor_over_direct_cost"`
	Note                    string  `json:"note,omitempty"`
}

// directBench drives one plain blockpool.Pool from one goroutine.
type directBench struct {
	pool    *blockpool.Pool
	w       *workload
	seq     blockpool.SeqID
	evicted []blockpool.Evicted
}

// newDirectBench builds a pool of n blocks of bt tokens and warms it: it runs
// steps until every block has held cached contents, so from then on each miss
// evicts.
func newDirectBench(n, bt int) (*directBench, error) {
	p, err := blockpool.New(blockpool.Config{NumBlocks: n, BlockSize: bt})
	if err != nil {
		return nil, err
	}
	d := &directBench{pool: p, w: newWorkload(0, 4*numStems, bt)}
	for d.pool.Stats().Evictions == 0 {
		if err := d.steps(64); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// steps allocates k sequences, each freeing the one allocated directLive steps
// before it, and drains the evictions as an owner would before offloading.
func (d *directBench) steps(k int) error {
	for range k {
		d.seq++
		prompt := d.w.prompt()
		if _, err := d.pool.Allocate(d.seq, prompt, ""); err != nil {
			return fmt.Errorf("allocate seq %d: %w", d.seq, err)
		}
		// The engine's prefill ran: commit, so the prompt's blocks can be hits.
		if _, err := d.pool.Commit(d.seq, len(prompt), nil); err != nil {
			return fmt.Errorf("commit seq %d: %w", d.seq, err)
		}
		d.evicted = d.pool.DrainEvicted(d.evicted[:0])
		if d.seq > directLive {
			if err := d.pool.Deallocate(d.seq - directLive); err != nil {
				return fmt.Errorf("deallocate seq %d: %w", d.seq-directLive, err)
			}
		}
	}
	return nil
}

// nsPerBlock times k steps.
func (d *directBench) nsPerBlock(k int) (float64, error) {
	start := time.Now()
	if err := d.steps(k); err != nil {
		return 0, err
	}
	return float64(time.Since(start).Nanoseconds()) / float64(k*seqBlocks), nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func runAlloc(quick bool, mx metricsSink) (*AllocResult, error) {
	rounds, stepsPerRound := 31, 8000
	if quick {
		rounds, stepsPerRound = 3, 500
	}
	sizes := []int{smallPoolBlocks, poolBlocks, largePoolBlocks}
	benches := make([]*directBench, len(sizes))
	for i, n := range sizes {
		d, err := newDirectBench(n, blockTokens)
		if err != nil {
			return nil, fmt.Errorf("pool of %d blocks: %w", n, err)
		}
		benches[i] = d
	}
	costs := make([][]float64, len(sizes))
	before := benches[1].pool.Stats()
	for range rounds {
		for i, d := range benches {
			ns, err := d.nsPerBlock(stepsPerRound)
			if err != nil {
				return nil, fmt.Errorf("pool of %d blocks: %w", sizes[i], err)
			}
			costs[i] = append(costs[i], ns)
		}
	}
	after := benches[1].pool.Stats()
	allocated := float64((after.HitBlocks + after.MissBlocks) - (before.HitBlocks + before.MissBlocks))
	r := &AllocResult{
		SeqBlocks:          seqBlocks,
		BlockTokens:        blockTokens,
		StemBlocks:         stemBlocks,
		Stems:              numStems,
		PoolBlocks:         poolBlocks,
		DirectRounds:       rounds,
		DirectSeqsPerRound: stepsPerRound,
		HitFraction:        float64(after.HitBlocks-before.HitBlocks) / allocated,
		EvictionsPerBlock:  float64(after.Evictions-before.Evictions) / allocated,
		NsPerBlock1k:       median(costs[0]),
		DirectBlocksPerS:   1e9 / median(costs[1]),
		NsPerBlock1m:       median(costs[2]),
		ActorBatch:         actorBatch,
		ActorClients:       actorClients,
	}
	benches = nil // let the 1M-block pool go before the actor runs

	a, err := runActor(quick, mx, blockTokens, true)
	if err != nil {
		return nil, fmt.Errorf("actor path: %w", err)
	}
	r.ActorBuilt = a.built
	r.Note = a.note
	if a.built {
		r.ActorWindowS = actorWindow(quick).Seconds()
		r.ActorBlocksPerS = a.blocksPerS
		r.ActorParallelBlocksPerS = a.parallelBlocksPerS
		r.ActorOverDirectCost = r.DirectBlocksPerS / a.blocksPerS
	}
	if err := runLongAlloc(r, quick, mx); err != nil {
		return nil, err
	}
	return r, nil
}

// runLongAlloc measures the direct core and one actor client at
// longBlockTokens tokens a block, on the headline pool: a realistic block,
// whose tokens the allocation hashes and a hit checks.
func runLongAlloc(r *AllocResult, quick bool, mx metricsSink) error {
	rounds, stepsPerRound := 15, 500
	if quick {
		rounds, stepsPerRound = 3, 50
	}
	d, err := newDirectBench(poolBlocks, longBlockTokens)
	if err != nil {
		return fmt.Errorf("%d-token blocks: %w", longBlockTokens, err)
	}
	var costs []float64
	for range rounds {
		ns, err := d.nsPerBlock(stepsPerRound)
		if err != nil {
			return fmt.Errorf("%d-token blocks: %w", longBlockTokens, err)
		}
		costs = append(costs, ns)
	}
	d = nil // let its pool go before the actor run
	r.LongBlockTokens = longBlockTokens
	r.LongDirectRounds, r.LongDirectSeqsPerRound = rounds, stepsPerRound
	r.LongDirectBlocksPerS = 1e9 / median(costs)
	a, err := runActor(quick, mx, longBlockTokens, false)
	if err != nil {
		return fmt.Errorf("actor path, %d-token blocks: %w", longBlockTokens, err)
	}
	if a.built {
		r.LongActorBlocksPerS = a.blocksPerS
		r.LongActorOverDirectCost = r.LongDirectBlocksPerS / a.blocksPerS
	}
	return nil
}

// actorWindow is how long runActor times each of its runs (its dur): the
// report states it, so it must stay the same figure.
func actorWindow(quick bool) time.Duration {
	if quick {
		return 300 * time.Millisecond
	}
	return 3 * time.Second
}

// actorResult is what the actor benchmark measured; built is false when this
// binary was compiled without it.
type actorResult struct {
	built              bool
	blocksPerS         float64
	parallelBlocksPerS float64
	note               string
}

// Shape of the actor runs: each client sends one Step message per step, freeing
// its previous batch and allocating actorBatch new sequences.
const (
	actorBatch   = 8
	actorClients = 8
)
