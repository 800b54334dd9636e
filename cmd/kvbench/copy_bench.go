package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/kvtier/kvtier/gpu"
)

// copyBatch is the number of blocks per copy batch, in memory and on disk.
const copyBatch = 32

// CopyResult is the copy suite's outcome. Every rate is payload bytes per second
// in GB/s (1e9 bytes): the median over rounds of one batch's rate, with the
// kinds interleaved round by round so they share the machine's state and a
// burst of background load costs every kind alike.
type CopyResult struct {
	Device     string `json:"device"`
	BlockBytes int    `json:"block_bytes"`
	BatchBlock int    `json:"batch_blocks"`
	Rounds     int    `json:"rounds"`
	// MemmoveGBps is copy() of the same 32 blocks between Go memory (as the host
	// backend's arena) and the pinned buffer, both directions in turn.
	MemmoveGBps float64 `json:"memmove_gbps"`
	D2HGBps     float64 `json:"d2h_gbps"`
	H2DGBps     float64 `json:"h2d_gbps"`
	HostPinned  bool    `json:"host_pinned"` // the host buffer was page-locked

	// D2H and H2D above use a block-contiguous arena (one copy per block).
	// The LayerSep figures copy the same blocks, same host buffer, in the
	// same rounds, from and to a layer-separate arena (vLLM's
	// [layer][kv][block][token][head][dim]), where each block is gathered
	// from or scattered to 2 x layers segments of LayerSepSegmentBytes.
	LayerSepD2HGBps      float64 `json:"layer_sep_d2h_gbps"`
	LayerSepH2DGBps      float64 `json:"layer_sep_h2d_gbps"`
	LayerSepSegmentBytes int     `json:"layer_sep_segment_bytes"`
	// LayerSepTimeRatio is the median over rounds of the layer-separate
	// copies' time (both directions) over the block-contiguous ones': 1.0
	// means the gather/scatter is free, 1.2 that it costs 20% more.
	LayerSepTimeRatio float64 `json:"layer_sep_time_ratio"`

	Disk   *DiskResult   `json:"disk"`
	Reload *ReloadResult `json:"reload"`
}

// runCopy runs the device<->host comparison, the disk one, and then the
// end-to-end reloads through a Manager.
func runCopy(quick bool, dir string) (*CopyResult, error) {
	layout, err := gpu.NewLayout(gpu.Llama3_8B, 16) // 2 MiB blocks
	if err != nil {
		return nil, err
	}
	r, err := runDeviceCopy(quick, layout)
	if err != nil {
		return nil, err
	}
	d, err := runDisk(quick, dir, layout.BlockBytes())
	if err != nil {
		return nil, fmt.Errorf("disk: %w", err)
	}
	r.Disk = d
	rl, err := runReload(quick, dir)
	if err != nil {
		return nil, fmt.Errorf("reload: %w", err)
	}
	rl.PinnedOfH2D = rl.PinnedGBps / r.H2DGBps
	rl.DiskOfDiskRd = rl.DiskGBps / d.DiskReadGBps
	r.Reload = rl
	return r, nil
}

// copyKinds are the arena layouts compared, block-contiguous first.
var copyKinds = [2]gpu.LayoutKind{gpu.BlockContiguous, gpu.LayerSeparate}

func runDeviceCopy(quick bool, layout gpu.Layout) (_ *CopyResult, err error) {
	rounds := 100
	if quick {
		rounds = 4
	}
	bb := layout.BlockBytes()
	dev, err := gpu.Default()
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := dev.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	var streams [len(copyKinds)]gpu.Stream
	for i, kind := range copyKinds {
		l, err := gpu.NewLayoutKind(layout.Spec(), layout.BlockTokens(), kind)
		if err != nil {
			return nil, err
		}
		arena, err := dev.NewKVArena(l, copyBatch)
		if err != nil {
			return nil, err
		}
		if streams[i], err = dev.NewStream(arena); err != nil {
			return nil, err
		}
	}
	host, err := dev.AllocHost(copyBatch * bb)
	if err != nil {
		return nil, err
	}
	hb := host.Bytes()
	src := make([]byte, copyBatch*bb) // the reference's "device" memory: Go memory, as the host arena's
	fillRandom(hb, 1)
	fillRandom(src, 2)
	ops := make([]gpu.CopyOp, copyBatch)
	for i := range ops {
		ops[i] = gpu.CopyOp{Block: i, Host: hb[i*bb : (i+1)*bb]}
	}
	ctx := context.Background()
	batch := func(copyFn func([]gpu.CopyOp) (*gpu.Event, error)) (time.Duration, error) {
		start := time.Now()
		ev, err := copyFn(ops)
		if err != nil {
			return 0, err
		}
		if err := ev.Wait(ctx); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
	memmove := func(toHost bool) time.Duration {
		start := time.Now()
		for i := range copyBatch {
			if toHost {
				copy(hb[i*bb:(i+1)*bb], src[i*bb:(i+1)*bb])
			} else {
				copy(src[i*bb:(i+1)*bb], hb[i*bb:(i+1)*bb])
			}
		}
		return time.Since(start)
	}
	// One untimed pass of each kind faults every page in.
	var mem, ratios []float64
	var rates [len(copyKinds)][gpu.H2D + 1][]float64
	batchGB := float64(copyBatch*bb) / 1e9
	for round := -1; round < rounds; round++ {
		// Each layout's pair of batches runs right after its own pair of
		// memmoves, so both see the same cache state. The batch that runs
		// first after the memmoves pays a few percent more (measured: with
		// a fixed order the first direction read 86-93% of copy(), the
		// second 99-109%, whichever it was), so the direction order
		// alternates round by round, and which layout goes first every
		// two rounds.
		h2dFirst := round%2 == 0
		var took [len(copyKinds)][gpu.H2D + 1]time.Duration
		var m time.Duration
		for i := range copyKinds {
			k := (i + (round+2)/2) % len(copyKinds)
			m += memmove(true) + memmove(false)
			first, second := streams[k].CopyD2H, streams[k].CopyH2D
			if h2dFirst {
				first, second = streams[k].CopyH2D, streams[k].CopyD2H
			}
			t1, err := batch(first)
			if err != nil {
				return nil, fmt.Errorf("copy (%v): %w", copyKinds[k], err)
			}
			t2, err := batch(second)
			if err != nil {
				return nil, fmt.Errorf("copy (%v): %w", copyKinds[k], err)
			}
			took[k][gpu.H2D], took[k][gpu.D2H] = t1, t2
			if !h2dFirst {
				took[k][gpu.H2D], took[k][gpu.D2H] = t2, t1
			}
		}
		if round < 0 {
			continue
		}
		mem = append(mem, float64(2*len(copyKinds))*batchGB/m.Seconds())
		for k := range copyKinds {
			for _, dir := range []gpu.Direction{gpu.D2H, gpu.H2D} {
				rates[k][dir] = append(rates[k][dir], batchGB/took[k][dir].Seconds())
			}
		}
		ratios = append(ratios, (took[1][gpu.D2H]+took[1][gpu.H2D]).Seconds()/(took[0][gpu.D2H]+took[0][gpu.H2D]).Seconds())
	}
	return &CopyResult{
		Device:               dev.Name(),
		BlockBytes:           bb,
		BatchBlock:           copyBatch,
		Rounds:               rounds,
		MemmoveGBps:          median(mem),
		D2HGBps:              median(rates[0][gpu.D2H]),
		H2DGBps:              median(rates[0][gpu.H2D]),
		HostPinned:           host.Pinned(),
		LayerSepD2HGBps:      median(rates[1][gpu.D2H]),
		LayerSepH2DGBps:      median(rates[1][gpu.H2D]),
		LayerSepSegmentBytes: layout.RegionBytes(),
		LayerSepTimeRatio:    median(ratios),
	}, nil
}

// fillRandom fills b with bytes that neither compress nor dedupe.
func fillRandom(b []byte, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
	}
}
