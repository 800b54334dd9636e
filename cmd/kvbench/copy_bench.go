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

	Disk *DiskResult `json:"disk"`
}

// runCopy runs the device<->host comparison and then the disk one.
func runCopy(quick bool, dir string) (*CopyResult, error) {
	layout, err := gpu.NewLayout(gpu.Llama3_8B, 16) // 2 MiB blocks
	if err != nil {
		return nil, err
	}
	r, err := runDeviceCopy(quick, layout.BlockBytes())
	if err != nil {
		return nil, err
	}
	d, err := runDisk(quick, dir, layout.BlockBytes())
	if err != nil {
		return nil, fmt.Errorf("disk: %w", err)
	}
	r.Disk = d
	return r, nil
}

func runDeviceCopy(quick bool, bb int) (_ *CopyResult, err error) {
	rounds := 100
	if quick {
		rounds = 4
	}
	dev, err := gpu.Default()
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := dev.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	arena, err := dev.NewArena(copyBatch, bb)
	if err != nil {
		return nil, err
	}
	stream, err := dev.NewStream(arena)
	if err != nil {
		return nil, err
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
	var mem, d2hs, h2ds []float64
	batchGB := float64(copyBatch*bb) / 1e9
	for round := -1; round < rounds; round++ {
		m := memmove(true) + memmove(false)
		// The batch that runs first after the memmoves pays a few percent more
		// (measured: with a fixed order the first direction read 86-93% of
		// copy(), the second 99-109%, whichever it was), so the order
		// alternates round by round.
		h2dFirst := round%2 == 0
		first, second := stream.CopyD2H, stream.CopyH2D
		if h2dFirst {
			first, second = stream.CopyH2D, stream.CopyD2H
		}
		t1, err := batch(first)
		if err != nil {
			return nil, fmt.Errorf("copy: %w", err)
		}
		t2, err := batch(second)
		if err != nil {
			return nil, fmt.Errorf("copy: %w", err)
		}
		h2d, d2h := t1, t2
		if !h2dFirst {
			h2d, d2h = t2, t1
		}
		if round >= 0 {
			mem = append(mem, 2*batchGB/m.Seconds())
			d2hs = append(d2hs, batchGB/d2h.Seconds())
			h2ds = append(h2ds, batchGB/h2d.Seconds())
		}
	}
	return &CopyResult{
		Device:      dev.Name(),
		BlockBytes:  bb,
		BatchBlock:  copyBatch,
		Rounds:      rounds,
		MemmoveGBps: median(mem),
		D2HGBps:     median(d2hs),
		H2DGBps:     median(h2ds),
		HostPinned:  host.Pinned(),
	}, nil
}

// fillRandom fills b with bytes that neither compress nor dedupe.
func fillRandom(b []byte, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
	}
}
