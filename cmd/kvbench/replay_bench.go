package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/trace"
)

// The replay suite allocates and frees every request of a Mooncake trace at
// its own block size (-trace-block-tokens, 512 tokens a hash id for Mooncake's
// traces and the embedded sample), hashing included, through the direct core
// (one blockpool.Pool on one goroutine) and through the Manager, one request
// a call and in batches. Token t of hash id h is splitmix64(h*B+t) mod
// replayVocab, B the block size, so that another implementation fed the same
// trace (nano-vllm's BlockManager, say) sees the same prompts; for an id so
// large that h*B+t would pass 2^64 (2^55 and up at 512 tokens, where ids 0
// and 2^55 would share a prompt), it is splitmix64(splitmix64(h)+t) mod
// replayVocab.
const (
	replayVocab = 32000
	replayBatch = 8
	// replayChunk is how many requests' prompts are generated (untimed) before
	// they are replayed (timed): it bounds the suite's memory to a few hundred
	// MiB whatever the trace's length.
	replayChunk = 512
)

// replayQuickRequests is how many of a trace's requests -quick replays: the
// first, in time order.
const replayQuickRequests = 600

// replayRounds is how many times the suite replays each path at each pool
// size, the paths interleaved.
const replayRounds = 3

// sinkIf is mx when keep is set, else a sink that keeps nothing.
func sinkIf(mx metricsSink, keep bool) metricsSink {
	if keep {
		return mx
	}
	return metricsSink{}
}

// replayPools are the pool sizes, in blocks, the suite replays at.
var replayPools = []int{1 << 10, 16 << 10}

// ReplayResult is the replay suite's outcome.
type ReplayResult struct {
	Trace       string       `json:"trace"`
	Requests    int          `json:"requests"`
	BlockTokens int          `json:"block_tokens"`
	Blocks      int64        `json:"blocks"` // blocks allocated per pass (partial last blocks included)
	Pools       []ReplayPool `json:"pools"`
	// TooShort is set when a pass allocates fewer than replayMinBlocks
	// blocks: its figures are printed, but a pass of microseconds times
	// cold caches and the clock more than the paths, so the replay targets
	// are N/A.
	TooShort bool   `json:"too_short,omitempty"`
	Note     string `json:"note"`
}

// replayMinBlocks is the fewest blocks a pass must allocate for the replay
// targets to be judged: at the direct core's 1-2 M blocks/s, 5-10 ms a
// pass. The embedded sample's 600 requests allocate about 14k.
const replayMinBlocks = 10_000

// ReplayPool is one pool size's row: blocks allocated and freed per second and
// the share of them served as hits, by path.
type ReplayPool struct {
	PoolBlocks int `json:"pool_blocks"`
	// BlocksPerS and HitRatio are keyed by path: "direct", "manager" (one
	// request a call), "manager_batch8".
	BlocksPerS map[string]float64 `json:"blocks_per_s"`
	HitRatio   map[string]float64 `json:"hit_ratio"`
	// ManagerOverDirectCost is the Manager's cost per block (one request a
	// call) over the direct core's.
	ManagerOverDirectCost float64 `json:"manager_over_direct_cost"`
	Batch8OverDirectCost  float64 `json:"batch8_over_direct_cost"`
	// Skipped says why the pool was not measured: a path found it too small
	// for what one of its calls allocates (a request of more blocks than the
	// pool, or a batch of requests of more new blocks than it has free, as a
	// trace of small blocks or long prompts brings). The other fields are
	// then empty and the pool's targets N/A.
	Skipped string `json:"skipped,omitempty"`
}

func splitmix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// replayPrompt appends req's prompt to dst: in a trace of blockTokens tokens
// a hash id, id h stands for tokens splitmix64(h*blockTokens+t) mod
// replayVocab, t = 0..blockTokens-1, the last block cut to input_length.
// An id too large for h*blockTokens+t to fit in 64 bits stands for
// splitmix64(splitmix64(h)+t) instead: wrapped, ids that differ by a
// multiple of 2^64/blockTokens would stand for the same prompt.
func replayPrompt(dst []int64, req trace.Request, blockTokens int) []int64 {
	start := len(dst)
	linear := (math.MaxUint64 - uint64(blockTokens-1)) / uint64(blockTokens) // ids up to it: h*blockTokens+t does not wrap
	for _, h := range req.HashIDs {
		n := min(blockTokens, req.InputLength-(len(dst)-start))
		base := uint64(h) * uint64(blockTokens)
		if uint64(h) > linear {
			base = splitmix64(uint64(h))
		}
		for t := range n {
			dst = append(dst, int64(splitmix64(base+uint64(t))%replayVocab))
		}
	}
	return dst
}

// replayChunks calls fn with the prompts of reqs, replayChunk requests at a
// time, and sums the durations fn reports (the generation is not timed).
// blockTokens is the trace's tokens per hash id.
func replayChunks(reqs []trace.Request, blockTokens int, fn func([][]int64) (time.Duration, error)) (time.Duration, error) {
	var buf []int64
	prompts := make([][]int64, 0, replayChunk)
	var total time.Duration
	for start := 0; start < len(reqs); start += replayChunk {
		chunk := reqs[start:min(start+replayChunk, len(reqs))]
		n := 0
		for _, r := range chunk {
			n += r.InputLength
		}
		if cap(buf) < n {
			buf = make([]int64, 0, n)
		}
		buf, prompts = buf[:0], prompts[:0]
		for _, r := range chunk {
			s := len(buf)
			buf = replayPrompt(buf, r, blockTokens)
			prompts = append(prompts, buf[s:len(buf):len(buf)])
		}
		d, err := fn(prompts)
		if err != nil {
			return 0, err
		}
		total += d
	}
	return total, nil
}

// replayCount is what one pass allocated.
type replayCount struct {
	blocks, hits int64
}

func (c replayCount) ratio() float64 {
	if c.blocks == 0 {
		return 0
	}
	return float64(c.hits) / float64(c.blocks)
}

// replayDirect replays reqs on a fresh pool of n blocks of blockTokens
// tokens: allocate (the pool hashes), commit every token, free.
func replayDirect(reqs []trace.Request, n, blockTokens int) (time.Duration, replayCount, error) {
	p, err := blockpool.New(blockpool.Config{NumBlocks: n, BlockSize: blockTokens})
	if err != nil {
		return 0, replayCount{}, err
	}
	var c replayCount
	var seq blockpool.SeqID
	var evicted []blockpool.Evicted
	d, err := replayChunks(reqs, blockTokens, func(prompts [][]int64) (time.Duration, error) {
		start := time.Now()
		for _, pr := range prompts {
			seq++
			a, err := p.Allocate(seq, pr, "")
			if err != nil {
				return 0, fmt.Errorf("allocate request %d: %w", seq, err)
			}
			if _, err := p.Commit(seq, len(pr), nil); err != nil {
				return 0, fmt.Errorf("commit request %d: %w", seq, err)
			}
			evicted = p.DrainEvicted(evicted[:0])
			if err := p.Deallocate(seq); err != nil {
				return 0, fmt.Errorf("free request %d: %w", seq, err)
			}
			c.blocks += int64(len(a.Blocks))
			c.hits += int64(a.HitBlocks)
		}
		return time.Since(start), nil
	})
	return d, c, err
}

// replayManager replays reqs through a Manager whose GPU tier has n blocks of
// blockTokens tokens, batch requests a Step: each Step commits and frees the
// previous batch and allocates the next, so one message carries a request's
// whole life. The Manager's metrics go to mx, as configuration config.
func replayManager(reqs []trace.Request, n, blockTokens, batch int, mx metricsSink, config string) (_ time.Duration, _ replayCount, err error) {
	ctx := context.Background()
	m, err := kvtier.New(kvtier.Config{GPUBlocks: n, BlockTokens: blockTokens, Registerer: mx.registerer(config)})
	if err != nil {
		return 0, replayCount{}, err
	}
	defer func() {
		if cerr := mx.close(ctx, m); err == nil && cerr != nil {
			err = fmt.Errorf("closing the manager: %w", cerr)
		}
	}()
	var c replayCount
	var seq uint64
	var held []uint64
	var lens []int
	var commits []kvtier.CommitItem
	var allocs []kvtier.AllocRequest
	step := func(prompts [][]int64) error {
		commits, allocs = commits[:0], allocs[:0]
		for i, s := range held {
			commits = append(commits, kvtier.CommitItem{Seq: s, Tokens: lens[i]})
		}
		free := held
		held, lens = nil, nil
		for _, pr := range prompts {
			seq++
			allocs = append(allocs, kvtier.AllocRequest{Seq: seq, Tokens: pr})
			held = append(held, seq)
			lens = append(lens, len(pr))
		}
		st, err := m.Step(ctx, kvtier.StepRequest{Commit: commits, Free: free, Allocate: allocs})
		if err != nil {
			return err
		}
		for i, err := range st.CommitErrs {
			if err != nil {
				return fmt.Errorf("commit request %d: %w", free[i], err)
			}
		}
		for i, err := range st.FreeErrs {
			if err != nil {
				return fmt.Errorf("free request %d: %w", free[i], err)
			}
		}
		for i, r := range st.Allocs {
			if r.Err != nil {
				return fmt.Errorf("allocate request %d: %w", allocs[i].Seq, r.Err)
			}
			<-r.Ready.Done() // GPU tier only: done at once
			c.blocks += int64(len(r.Blocks))
			c.hits += int64(r.Tokens.Of(kvtier.GPU) / blockTokens)
		}
		return nil
	}
	d, err := replayChunks(reqs, blockTokens, func(prompts [][]int64) (time.Duration, error) {
		start := time.Now()
		for i := 0; i < len(prompts); i += batch {
			if err := step(prompts[i:min(i+batch, len(prompts))]); err != nil {
				return 0, err
			}
		}
		// The last batch's prompts are reused by the next chunk: end it here.
		if err := step(nil); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	})
	return d, c, err
}

// runReplay runs the replay suite on the trace f (read as loadTrace does:
// its blockTokens is the -trace-block-tokens flag), or on the embedded sample (path
// "", blockTokens ignored: the sample has Mooncake's 512). The pools' blocks
// have the trace's size. The Managers' metrics go to mx, as configurations
// "replay/<path>/pool<blocks>".
func runReplay(f traceFile, quick bool, mx metricsSink) (*ReplayResult, error) {
	reqs, name, blockTokens, err := loadTrace(f)
	if err != nil {
		return nil, err
	}
	if quick && len(reqs) > replayQuickRequests {
		name += fmt.Sprintf(", first %d of %d requests (-quick)", replayQuickRequests, len(reqs))
		reqs = reqs[:replayQuickRequests]
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("trace %s has no requests", name)
	}
	r := &ReplayResult{Trace: name, Requests: len(reqs), BlockTokens: blockTokens,
		Note: fmt.Sprintf("median of %d rounds, the paths interleaved; cost ratios: median of the rounds' ratios; ", replayRounds) +
			"direct: one blockpool.Pool, Allocate (hashing included) + Commit + Deallocate per request; " +
			"manager: kvtier.Manager (GPU tier only), one Step per request committing and freeing the previous one; " +
			"manager_batch8: 8 requests per Step (a batch's requests do not hit each other's blocks, which are not computed yet when it is allocated: commit before cache, so its hits can be lower); " +
			"hits: blocks found cached over blocks allocated, where a prompt's partly filled last block is allocated but never cached (full blocks only), so never a hit (the trace suite counts it like a full one); prompt generation untimed"}
	// The paths, direct first (the cost ratios' base); metrics are kept
	// for the first round only, one Manager a configuration.
	paths := []struct {
		name string
		run  func(q []trace.Request, n int, metrics bool) (time.Duration, replayCount, error)
	}{
		{"direct", func(q []trace.Request, n int, _ bool) (time.Duration, replayCount, error) {
			return replayDirect(q, n, blockTokens)
		}},
		{"manager", func(q []trace.Request, n int, metrics bool) (time.Duration, replayCount, error) {
			return replayManager(q, n, blockTokens, 1, sinkIf(mx, metrics), fmt.Sprintf("replay/manager/pool%d", n))
		}},
		{"manager_batch8", func(q []trace.Request, n int, metrics bool) (time.Duration, replayCount, error) {
			return replayManager(q, n, blockTokens, replayBatch, sinkIf(mx, metrics), fmt.Sprintf("replay/manager_batch%d/pool%d", replayBatch, n))
		}},
	}
	for _, n := range replayPools {
		row := ReplayPool{PoolBlocks: n, BlocksPerS: map[string]float64{}, HitRatio: map[string]float64{}}
		// Rounds with the paths interleaved, each round starting with the
		// next path: a ratio is the median of the rounds' ratios, so a
		// burst of load from elsewhere on a small machine, or running
		// first, does not decide it.
		times := make([][]time.Duration, len(paths))
		for round := range replayRounds {
			for k := range paths {
				i := (k + round) % len(paths)
				d, c, err := paths[i].run(reqs, n, round == 0)
				if errors.Is(err, blockpool.ErrNoSpace) {
					row.Skipped = fmt.Sprintf("pool too small for this trace: %s: %v", paths[i].name, err)
					break
				}
				if err != nil {
					return nil, fmt.Errorf("%s, pool %d: %w", paths[i].name, n, err)
				}
				r.Blocks = c.blocks
				times[i] = append(times[i], d)
				row.HitRatio[paths[i].name] = c.ratio()
			}
			if row.Skipped != "" {
				break
			}
		}
		if row.Skipped != "" {
			r.Pools = append(r.Pools, ReplayPool{PoolBlocks: n, Skipped: row.Skipped})
			continue
		}
		cost := func(i int) float64 { // median over the rounds of path i's time over direct's
			ratios := make([]float64, replayRounds)
			for round := range ratios {
				ratios[round] = times[i][round].Seconds() / times[0][round].Seconds()
			}
			return median(ratios)
		}
		for i, p := range paths {
			secs := make([]float64, replayRounds)
			for round, d := range times[i] {
				secs[round] = d.Seconds()
			}
			row.BlocksPerS[p.name] = float64(r.Blocks) / median(secs)
		}
		row.ManagerOverDirectCost = cost(1)
		row.Batch8OverDirectCost = cost(2)
		r.Pools = append(r.Pools, row)
	}
	r.TooShort = r.Blocks < replayMinBlocks
	return r, nil
}
