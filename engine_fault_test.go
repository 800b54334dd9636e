package kvtier_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/internal/enginetest"
	"github.com/kvtier/kvtier/refengine"
)

var errInjected = errors.New("engine test: injected copy fault")

// copyFaults is a host device's fault hook: seeded random failures of
// onboard (H2D) and offload (D2H) batches, and a gate that holds every
// onboard until released, to make a load miss its deadline.
type copyFaults struct {
	mu               sync.Mutex
	rng              *rand.Rand
	failH2D, failD2H int // percent of batches, while on
	on               atomic.Bool
	gate             chan struct{} // while not nil, onboards wait for it to close
	h2dFailed        atomic.Int64
	d2hFailed        atomic.Int64
	held             atomic.Int64
}

func (f *copyFaults) hook(dir gpu.Direction, ops []gpu.CopyOp) error {
	f.mu.Lock()
	gate, r := f.gate, f.rng.IntN(100)
	f.mu.Unlock()
	if dir == gpu.H2D && gate != nil {
		f.held.Add(1)
		<-gate
	}
	if !f.on.Load() {
		return nil
	}
	switch {
	case dir == gpu.H2D && r < f.failH2D:
		f.h2dFailed.Add(1)
		return errInjected
	case dir == gpu.D2H && r < f.failD2H:
		f.d2hFailed.Add(1)
		return errInjected
	}
	return nil
}

// hold makes onboards wait until release.
func (f *copyFaults) hold() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gate == nil {
		f.gate = make(chan struct{})
	}
}

func (f *copyFaults) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gate != nil {
		close(f.gate)
		f.gate = nil
	}
}

func faultyDevice(t *testing.T, f *copyFaults) gpu.Device {
	t.Helper()
	dev, err := gpu.NewHost(gpu.HostConfig{Fault: f.hook})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// cacheBelow serves prompt once (so its blocks are committed), then empties
// the GPU, and checks that the GPU holds none of its blocks and a tier below
// holds its first: the next admission of prompt loads from below (through
// pinned memory, from disk too). Exists counts each tier's leading run, so a
// chain split between pinned memory and disk shows as the first block's tier
// only.
func cacheBelow(t *testing.T, ctx context.Context, e *enginetest.Engine, p *enginetest.Prompts, seq uint64, prompt []int64, gpuBlocks int) {
	t.Helper()
	g := e.NewGen(seq, prompt, "")
	if err := g.Run(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(); err != nil {
		t.Fatal(err)
	}
	if err := enginetest.EvictGPU(ctx, e.M, p, 1<<40, gpuBlocks); err != nil {
		t.Fatal(err)
	}
	if err := e.M.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if pr, err := e.M.Exists(ctx, prompt, ""); err != nil || pr.Tokens.Of(kvtier.GPU) != 0 || pr.Tokens.Of(kvtier.Pinned)+pr.Tokens.Of(kvtier.Disk) == 0 {
		t.Fatalf("prompt not below the GPU alone: %+v (%v)", pr, err)
	}
}

// TestReferenceEngineCopyFaults: onboard and offload copies fail at random
// (pinned memory and disk below), and loads held past their deadline come
// back late, their blocks swapped for fresh ones while the late copy still
// lands in the old. Faults lower the hit ratio; no logit changes. The test
// asserts that failed and late loads happened and that loads still served.
func TestReferenceEngineCopyFaults(t *testing.T) {
	ctx := engineCtx(t)
	f := &copyFaults{rng: rand.New(rand.NewPCG(5, 5)), failH2D: 30, failD2H: 20}
	const gpuBlocks = 24
	cfg := engineConfig(t, gpuBlocks, 32, gpu.LayerSeparate)
	cfg.Device = faultyDevice(t, f)
	// A disk with room for what the GPU pushes through pinned memory: the
	// late-load part below needs its prompt still below.
	cfg.DiskDir, cfg.DiskBytes = t.TempDir(), 1<<25
	cfg.ReadDeadlineBase, cfg.ReadDeadlinePerToken = 20*time.Millisecond, time.Microsecond
	m := mustNew(t, cfg)
	defer mustClose(t, m)
	defer f.release()
	model := engineModel(t)
	p := enginetest.NewPrompts(51, refengine.TinyConfig.Vocab, ebt, 4)
	f.on.Store(true)
	// Rounds of 60 requests until failed loads, served loads and failed
	// offloads have all happened: how many loads a round makes depends on
	// what the tiers hold, not on what this test checks.
	var tally enginetest.Tally
	for round := range 5 {
		tally.Add(serveChecked(t, ctx, &enginetest.Engine{M: m, Model: model, Chunk: 5}, p, uint64(1+100*round), 60, 2, 7))
		if tally.Failed > 0 && tally.Loaded > 0 && f.d2hFailed.Load() > 0 {
			break
		}
	}
	if tally.Failed == 0 || tally.Loaded == 0 || f.d2hFailed.Load() == 0 {
		t.Fatalf("faults or loads missing: %v; h2d failed %d, d2h failed %d", tally, f.h2dFailed.Load(), f.d2hFailed.Load())
	}
	t.Logf("random faults: %v; h2d failed %d, d2h failed %d batches", tally, f.h2dFailed.Load(), f.d2hFailed.Load())

	// Late loads: the onboard is held until its deadline passed.
	f.on.Store(false)
	e := &enginetest.Engine{M: m, Model: model, Chunk: 3}
	for i, s := range p.Stems {
		prompt := append(append([]int64(nil), s...), p.Unique(2)...)
		cacheBelow(t, ctx, e, p, uint64(1000+10*i), prompt, gpuBlocks)
		g := e.NewGen(uint64(1001+10*i), prompt, "")
		f.hold()
		err := g.Admit(ctx)
		f.release()
		if err != nil {
			t.Fatal(err)
		}
		if out := g.LastOut; out.Late == 0 || out.Blocks == nil || out.ValidTokens != g.Last.Tokens.Of(kvtier.GPU) {
			t.Fatalf("a held load was not late: %+v, outcome %+v", g.Last, out)
		}
		if err := g.Prefill(ctx); err != nil {
			t.Fatal(err)
		}
		if err := g.Decode(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if err := g.Finish(ctx); err != nil {
			t.Fatal(err)
		}
		if err := g.Check(); err != nil {
			t.Fatal(err)
		}
		// The late copy landed in the old blocks: the prompt is served
		// right from wherever it is now.
		again := e.NewGen(uint64(1002+10*i), prompt, "")
		if err := again.Run(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if err := again.Check(); err != nil {
			t.Fatal(err)
		}
	}
	if f.held.Load() == 0 {
		t.Fatal("no onboard was held")
	}
	if err := enginetest.CheckNoLeaks(ctx, m); err != nil {
		t.Fatal(err)
	}
}

// TestReferenceEngineCanceledCalls: every state-changing call (allocate,
// commit, append, swap, free) runs under a context canceled before the
// call, while it runs, or not at all. A call that fails with ErrCanceled must
// have had no effect, so the engine makes it again and must succeed (an
// allocation that took effect would leave its sequence id taken, an append
// would add its token twice); a call that succeeds was applied in full. At
// the end no sequence is live, no block is held, and every sequence id can
// be allocated again.
func TestReferenceEngineCanceledCalls(t *testing.T) {
	ctx := engineCtx(t)
	cfg := engineConfig(t, 48, 32, gpu.BlockContiguous)
	m := mustNew(t, cfg)
	defer mustClose(t, m)
	var n, pre atomic.Int64
	interfere := func(op string, ctx context.Context) (context.Context, func()) {
		cctx, cancel := context.WithCancel(ctx)
		switch n.Add(1) % 3 {
		case 0: // canceled before the call
			pre.Add(1)
			cancel()
			return cctx, cancel
		case 1: // canceled while the call runs
			go func() {
				runtime.Gosched()
				cancel()
			}()
		}
		return cctx, cancel
	}
	model := engineModel(t)
	p := enginetest.NewPrompts(61, refengine.TinyConfig.Vocab, ebt, 3)
	var tally enginetest.Tally
	var seqs []uint64
	for i := range 24 {
		e := &enginetest.Engine{M: m, Model: model, Chunk: 1 + i%4, Interfere: interfere}
		g := e.NewGen(uint64(i+1), p.Next(), "")
		seqs = append(seqs, g.Seq)
		if err := g.Admit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := g.Prefill(ctx); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if err := g.Preempt(ctx, i%2 == 0 /* swap */); err != nil {
				t.Fatal(err)
			}
			if err := g.Admit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := g.Prefill(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := g.Decode(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if err := g.Finish(ctx); err != nil {
			t.Fatal(err)
		}
		if err := g.Check(); err != nil {
			t.Fatal(err)
		}
		tally.Add(g.Tally)
	}
	// Precanceled calls always fail with ErrCanceled: they are all counted.
	if pre.Load() == 0 || int64(tally.Canceled) < pre.Load() || tally.Promised.Of(kvtier.GPU) == 0 {
		t.Fatalf("%d calls canceled before they ran, %d counted canceled: %v", pre.Load(), tally.Canceled, tally)
	}
	if err := enginetest.CheckNoLeaks(ctx, m); err != nil {
		t.Fatal(err)
	}
	for _, seq := range seqs {
		if _, err := m.Allocate(ctx, kvtier.AllocRequest{Seq: seq, Tokens: []int64{1}}); err != nil {
			t.Fatalf("sequence id %d is stuck: %v", seq, err)
		}
		if err := m.Free(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d calls interfered with, %d canceled before; %v", n.Load(), pre.Load(), tally)
}

// TestReferenceEngineConcurrent: goroutines serve requests over a few shared
// stems at once, two interleaved sequences each, with chunked prefill,
// preemption by swap and by recompute and aborts: the same prefix is often
// in flight in several sequences, each of which may hit only what another
// committed. Errors are collected per goroutine; every logit matches; no
// sequence or block is left held.
func TestReferenceEngineConcurrent(t *testing.T) {
	ctx := engineCtx(t)
	const goroutines, rounds = 4, 6
	cfg := engineConfig(t, 96, 64, gpu.LayerSeparate)
	m := mustNew(t, cfg)
	defer mustClose(t, m)
	model := engineModel(t)
	p := enginetest.NewPrompts(71, refengine.TinyConfig.Vocab, ebt, 3)
	errs := make([]error, goroutines)
	tallies := make([]enginetest.Tally, goroutines)
	var wg sync.WaitGroup
	for w := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tallies[w], errs[w] = enginetest.Mixed(ctx, &enginetest.Engine{M: m, Model: model}, p, uint64(w), 99, rounds)
		}()
	}
	wg.Wait()
	var tally enginetest.Tally
	for w, err := range errs {
		if err != nil {
			t.Errorf("goroutine %d: %v", w, err)
		}
		tally.Add(tallies[w])
	}
	if t.Failed() {
		t.FailNow()
	}
	if err := enginetest.CheckNoLeaks(ctx, m); err != nil {
		t.Fatal(err)
	}
	if tally.Promised.Of(kvtier.GPU) == 0 || tally.Swapped == 0 || tally.Recomputed == 0 || tally.Aborted == 0 {
		t.Fatalf("a path was not exercised: %v", tally)
	}
	t.Logf("%v", tally)
}

// TestReferenceEngineCatchesBrokenEngines proves the checks above can fail:
// an engine whose store corrupts what it reads fails Check; one that never
// commits gets no hit at all, which the tests' hit assertions reject; one
// that trusts the allocation over the load outcome computes wrong logits
// when onboards fail or come late.
func TestReferenceEngineCatchesBrokenEngines(t *testing.T) {
	ctx := engineCtx(t)
	model := engineModel(t)
	t.Run("corrupt-reads", func(t *testing.T) {
		m := mustNew(t, engineConfig(t, 24, 0, gpu.LayerSeparate))
		defer mustClose(t, m)
		e := &enginetest.Engine{M: m, Model: model, WrapKV: func(s refengine.KVStore) refengine.KVStore { return flipKV{s} }}
		g := e.NewGen(1, enginetest.NewPrompts(1, refengine.TinyConfig.Vocab, ebt, 1).Next(), "")
		if err := g.Run(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if err := g.Check(); err == nil {
			t.Fatal("a store that flips a bit on read passed the check")
		}
	})
	t.Run("skip-commit", func(t *testing.T) {
		m := mustNew(t, engineConfig(t, 24, 16, gpu.BlockContiguous))
		defer mustClose(t, m)
		e := &enginetest.Engine{M: m, Model: model, SkipCommit: true}
		var tally enginetest.Tally
		p := enginetest.NewPrompts(2, refengine.TinyConfig.Vocab, ebt, 2)
		for i := range 12 {
			g := e.NewGen(uint64(i+1), p.Next(), "")
			if err := g.Run(ctx, 1); err != nil {
				t.Fatal(err)
			}
			tally.Add(g.Tally)
		}
		if tally.Promised.Of(kvtier.GPU) != 0 || tally.Promised.Of(kvtier.Pinned) != 0 || tally.Loaded != 0 {
			t.Fatalf("an engine that never commits got hits: %v", tally)
		}
	})
	for _, late := range []bool{false, true} {
		name := "trust-alloc/failed-loads"
		if late {
			name = "trust-alloc/late-loads"
		}
		t.Run(name, func(t *testing.T) {
			f := &copyFaults{rng: rand.New(rand.NewPCG(3, 3)), failH2D: 100}
			const gpuBlocks = 24
			cfg := engineConfig(t, gpuBlocks, 32, gpu.LayerSeparate)
			cfg.Device = faultyDevice(t, f)
			cfg.ReadDeadlineBase = 20 * time.Millisecond
			m := mustNew(t, cfg)
			defer mustClose(t, m)
			defer f.release()
			p := enginetest.NewPrompts(4, refengine.TinyConfig.Vocab, ebt, 1)
			prompt := append(append([]int64(nil), p.Stems[0]...), p.Unique(3)...)
			cacheBelow(t, ctx, &enginetest.Engine{M: m, Model: model}, p, 1, prompt, gpuBlocks)
			g := (&enginetest.Engine{M: m, Model: model, TrustAlloc: true}).NewGen(2, prompt, "")
			if late {
				f.hold()
			} else {
				f.on.Store(true)
			}
			err := g.Admit(ctx)
			if err == nil {
				err = g.Prefill(ctx)
			}
			f.release()
			if err != nil {
				t.Fatal(err)
			}
			if g.LastOut.Failed+g.LastOut.Late == 0 {
				t.Fatalf("the load neither failed nor came late: %+v", g.LastOut)
			}
			if err := g.Check(); err == nil {
				t.Fatal("an engine that ignores the load outcome passed the check")
			}
			if err := g.Finish(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// flipKV flips a bit of the first key element it reads at every position.
type flipKV struct{ refengine.KVStore }

func (f flipKV) ReadKV(layer, pos int, k, v []float32) error {
	if err := f.KVStore.ReadKV(layer, pos, k, v); err != nil {
		return err
	}
	if pos%3 == 0 {
		k[0] = -k[0]
	}
	return nil
}
