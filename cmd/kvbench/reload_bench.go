package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/gpu"
)

// ReloadResult is the end-to-end reload path as an engine sees it: Allocate of
// a prompt whose blocks only a lower tier holds, until its Ready says the
// last of them is in GPU memory, with the read deadline off. One chain of
// Blocks blocks (Llama-3-8B, 16-token blocks: 2 MiB each) per round from
// pinned memory and one from disk, in the same rounds. Rates are payload
// bytes per second (GB/s, 1e9), the median over rounds; the shares compare
// them with the copy suite's H2D and disk tier read of the same run: what
// the Manager's lookups, slot grants, disk reads into pinned slots and H2D
// copies cost together over the bare copy or read. The disk share is not
// paired round by round (the disk suite's rounds interleave reads with
// writes, the reload's do not), so on a disk whose speed swings between
// rounds, as this VM's does (0.4–0.9 GB/s for the same pread), read it over
// several runs; kvbench sets no target on it.
type ReloadResult struct {
	BlockBytes  int     `json:"block_bytes"`
	Blocks      int     `json:"blocks_per_reload"`
	Rounds      int     `json:"rounds"`
	PinnedGBps  float64 `json:"pinned_gbps"`
	DiskGBps    float64 `json:"disk_gbps"`
	PinnedOfH2D float64 `json:"pinned_over_h2d"` // PinnedGBps / CopyResult.H2DGBps
	// PinnedOverCopy is the median over rounds of the time a copy() of the
	// same bytes between Go buffers takes, timed right after the pinned
	// reload in the same round, over the reload's: on the host backend the
	// reload's H2D is such a copy, so this is the share of the reload the
	// copy itself is.
	PinnedOverCopy float64 `json:"pinned_over_copy"`
	DiskOfDiskRd   float64 `json:"disk_over_disk_read"`    // DiskGBps / DiskResult.DiskReadGBps
	FloodBlocks    int     `json:"flood_blocks_per_round"` // median blocks of other chains written per round to push the two down
}

// reloadDiskBlocks sizes the reload's disk tier, which reserves its whole
// capacity on creation: room for a round's chains and floods several times
// over (a round writes about 300 blocks down), no more, so that CI's quick
// run does not reserve gigabytes of its temp dir.
const reloadDiskBlocks = 512

// errNotBelow is returned when a chain is not where the round put it: the
// tiers' capacities no longer push it down as the benchmark assumes.
var errNotBelow = errors.New("kvbench: reload: chain not on the tier it was pushed to")

// runReload measures the reload paths on a Manager with 64 GPU blocks, 192
// blocks of pinned memory and a disk tier in a temp dir under parent. A
// round writes a chain and writes other chains until it is on disk alone,
// then writes a second chain and others until it is in pinned memory alone;
// then it reloads the two, the pinned one first.
func runReload(quick bool, parent string) (_ *ReloadResult, err error) {
	const bt, chain, tierBlocks = 16, copyBatch, 64
	rounds := 12
	if quick {
		rounds = 2
	}
	layout, err := gpu.NewLayout(gpu.Llama3_8B, bt)
	if err != nil {
		return nil, err
	}
	bb := layout.BlockBytes()
	dir, err := os.MkdirTemp(parent, "kvbench-reload-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if rerr := os.RemoveAll(dir); err == nil && rerr != nil {
			err = rerr
		}
	}()
	ctx := context.Background()
	m, err := kvtier.New(kvtier.Config{
		GPUBlocks:        tierBlocks,
		BlockTokens:      bt,
		Model:            gpu.Llama3_8B,
		ModelID:          "kvbench-reload",
		PinnedBytes:      int64(3 * tierBlocks * bb),
		DiskDir:          dir,
		DiskBytes:        int64(reloadDiskBlocks * bb),
		ReadDeadlineBase: -1,
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := m.Close(ctx); err == nil && cerr != nil {
			err = cerr
		}
	}()
	memSrc, memDst := make([]byte, chain*bb), make([]byte, chain*bb)
	fillRandom(memSrc, 5)
	copy(memDst, memSrc) // faults the pages in
	memmove := func() time.Duration {
		start := time.Now()
		for i := range chain {
			copy(memDst[i*bb:(i+1)*bb], memSrc[i*bb:(i+1)*bb])
		}
		return time.Since(start)
	}
	seq := uint64(0)
	next := int64(1)
	newChain := func(blocks int) []int64 {
		t := make([]int64, blocks*bt)
		for i := range t {
			t[i] = next
			next++
		}
		return t
	}
	// write allocates tokens as a new sequence, commits and frees it,
	// returning how long Allocate took to be Ready and what it found where.
	write := func(tokens []int64) (time.Duration, kvtier.AllocResult, error) {
		seq++
		start := time.Now()
		r, err := m.Allocate(ctx, kvtier.AllocRequest{Seq: seq, Tokens: tokens})
		if err != nil {
			return 0, r, err
		}
		<-r.Ready.Done()
		d := time.Since(start)
		if err := m.Commit(ctx, seq, len(tokens)); err != nil {
			return 0, r, err
		}
		return d, r, m.Free(ctx, seq)
	}
	// pushDown writes other chains, GPU-sized, until tokens are wholly on
	// tier and on no tier above it (Flush after each, so write-downs are
	// done), and returns how many blocks that took. Where a chain lands
	// depends on the offload-ahead window and the tiers' policies, so the
	// benchmark asks rather than assumes.
	pushDown := func(tokens []int64, tier kvtier.Tier) (int, error) {
		for n := 1; n <= 16; n++ {
			if _, _, err := write(newChain(tierBlocks)); err != nil {
				return 0, err
			}
			if err := m.Flush(ctx); err != nil {
				return 0, err
			}
			pr, err := m.Exists(ctx, tokens, "")
			if err != nil {
				return 0, err
			}
			above := 0
			for t := kvtier.GPU; t < tier; t <<= 1 {
				above += pr.Tokens.Of(t)
			}
			if pr.Tokens.Of(tier) == len(tokens) && above == 0 {
				return n * tierBlocks, nil
			}
		}
		return 0, fmt.Errorf("%w: %v after %d blocks of other chains", errNotBelow, tier, 16*tierBlocks)
	}
	// place writes a new chain and pushes it down to tier.
	place := func(tier kvtier.Tier) ([]int64, int, error) {
		tokens := newChain(chain)
		if _, _, err := write(tokens); err != nil {
			return nil, 0, err
		}
		n, err := pushDown(tokens, tier)
		return tokens, n, err
	}
	gb := float64(chain*bb) / 1e9
	// reload allocates tokens again and returns the rate at which they came
	// up, all of them from tier.
	reload := func(tokens []int64, tier kvtier.Tier) (float64, error) {
		d, r, err := write(tokens)
		if err != nil {
			return 0, err
		}
		if got := r.Tokens.Of(tier); got != len(tokens) || r.Ready.Outcome().ValidTokens != len(tokens) {
			return 0, fmt.Errorf("%w: %v: found %v, %d valid of %d", errNotBelow, tier, r.Tokens, r.Ready.Outcome().ValidTokens, len(tokens))
		}
		return gb / d.Seconds(), nil
	}
	res := &ReloadResult{BlockBytes: bb, Blocks: chain, Rounds: rounds}
	var pinned, onDisk, floods, ratios []float64
	for round := -1; round < rounds; round++ { // round -1 faults pages in, untimed
		toDisk, n1, err := place(kvtier.Disk)
		if err != nil {
			return nil, err
		}
		toPinned, n2, err := place(kvtier.Pinned)
		if err != nil {
			return nil, err
		}
		floods = append(floods, float64(n1+n2))
		// Pinned first: the disk reload stages through pinned slots, which
		// could push the pinned chain down before it is read.
		pinnedRate, err := reload(toPinned, kvtier.Pinned)
		if err != nil {
			return nil, err
		}
		copyRate := gb / memmove().Seconds() // right after, as the doc says
		diskRate, err := reload(toDisk, kvtier.Disk)
		if err != nil {
			return nil, err
		}
		if round >= 0 {
			pinned = append(pinned, pinnedRate)
			ratios = append(ratios, pinnedRate/copyRate)
			onDisk = append(onDisk, diskRate)
		}
	}
	res.PinnedGBps, res.DiskGBps = median(pinned), median(onDisk)
	res.PinnedOverCopy = median(ratios)
	res.FloodBlocks = int(median(floods))
	return res, nil
}
