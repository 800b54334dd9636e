package kvtier

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/gpu"
)

// TestProbeAllocateInOrderConcurrent (review probe): several goroutines
// drive AllocateInOrder (and Step with AllocateInOrder), Commit and Free on
// a Manager with few GPU blocks, IngestAll write-throughs slowed so that
// requests park, and contexts that time out. Each answer must keep the
// in-order semantics (after the first ErrNoSpace or ErrCanceled, every
// later request that is not refused for its own arguments fails too and
// holds nothing); at the end, every sequence freed and after Flush, every
// GPU block is free and nothing is in flight.
func TestProbeAllocateInOrderConcurrent(t *testing.T) {
	var slow atomic.Bool
	slow.Store(true)
	dev, err := gpu.NewHost(gpu.HostConfig{Fault: func(dir gpu.Direction, ops []gpu.CopyOp) error {
		if dir == gpu.D2H && slow.Load() {
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(t, Config{GPUBlocks: 16, PinnedBytes: 12 << 12, Ingestion: IngestAll, Device: dev})
	const goroutines, rounds = 8, 150
	var (
		wg                                           sync.WaitGroup
		mu                                           sync.Mutex
		fails                                        []string
		nOK, nNoSpace, nCanceled, nCallErr, nStopped atomic.Int64
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(fails) < 20 {
			fails = append(fails, fmt.Sprintf(format, args...))
		}
	}
	bg := context.Background()
	free := func(seq uint64) {
		for {
			err := m.Free(bg, seq)
			if err == nil || errors.Is(err, blockpool.ErrUnknownSequence) {
				return
			}
			if !errors.Is(err, ErrCanceled) {
				fail("free %d: %v", seq, err)
				return
			}
		}
	}
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			next := uint64(g) << 32
			for range rounds {
				n := 1 + rng.IntN(4)
				reqs := make([]AllocRequest, n)
				for i := range reqs {
					next++
					base := rng.IntN(6) * 1000 // shared prefixes: hits, loads from pinned
					reqs[i] = AllocRequest{Seq: next, Tokens: toks(base, 1+rng.IntN(6*bt))}
				}
				if rng.IntN(8) == 0 {
					reqs[n-1].MaxSeqLen = 1 // ErrTooLong unless 1 token
				}
				ctx, cancel := bg, context.CancelFunc(func() {})
				if rng.IntN(2) == 0 {
					ctx, cancel = context.WithTimeout(bg, time.Duration(rng.IntN(3000))*time.Microsecond)
				}
				var res []AllocResult
				var err error
				if rng.IntN(3) == 0 {
					var st StepResult
					st, err = m.Step(ctx, StepRequest{Allocate: reqs, AllocateInOrder: true})
					res = st.Allocs
				} else {
					res, err = m.AllocateInOrder(ctx, reqs)
				}
				cancel()
				if err != nil {
					nCallErr.Add(1)
					if !errors.Is(err, ErrCanceled) {
						fail("call: %v", err)
					}
					for _, r := range reqs { // nothing applied
						if e := m.Free(bg, r.Seq); !errors.Is(e, blockpool.ErrUnknownSequence) {
							fail("call failed (%v) yet sequence %d is held (free: %v)", err, r.Seq, e)
						}
					}
					continue
				}
				if len(res) != n {
					fail("%d results for %d requests", len(res), n)
					continue
				}
				var stopper error
				for i, r := range res {
					own := errors.Is(r.Err, ErrTooLong)
					switch {
					case r.Err == nil:
						nOK.Add(1)
						if stopper != nil {
							fail("request %d of %d allocated after %v", i, n, stopper)
						}
					case own:
					case errors.Is(r.Err, ErrNoSpace):
						nNoSpace.Add(1)
						if stopper != nil && !errors.Is(stopper, ErrNoSpace) {
							fail("request %d: %v after stopper %v", i, r.Err, stopper)
						}
					case errors.Is(r.Err, ErrCanceled):
						nCanceled.Add(1)
						if stopper != nil && !errors.Is(stopper, ErrCanceled) {
							fail("request %d: %v after stopper %v", i, r.Err, stopper)
						}
					default:
						nStopped.Add(1)
						fail("request %d: unexpected %v", i, r.Err)
					}
					if r.Err != nil && !own && stopper == nil {
						stopper = r.Err
					}
					if r.Err != nil {
						if r.Blocks != nil || r.Ready != nil {
							fail("request %d failed (%v) with blocks or Ready", i, r.Err)
						}
						if e := m.Free(bg, reqs[i].Seq); !errors.Is(e, blockpool.ErrUnknownSequence) {
							fail("request %d failed (%v) yet held (free: %v)", i, r.Err, e)
						}
					}
				}
				for i, r := range res {
					if r.Err != nil {
						continue
					}
					if rng.IntN(2) == 0 {
						<-r.Ready.Done()
						full := len(reqs[i].Tokens) / bt * bt
						cctx, ccancel := context.WithTimeout(bg, time.Duration(rng.IntN(2000))*time.Microsecond)
						_ = m.Commit(cctx, reqs[i].Seq, full) // may be canceled: fine
						ccancel()
					}
					free(reqs[i].Seq)
				}
			}
		}()
	}
	wg.Wait()
	slow.Store(false)
	for _, f := range fails {
		t.Error(f)
	}
	t.Logf("ok %d, ErrNoSpace %d, ErrCanceled %d, call errors %d", nOK.Load(), nNoSpace.Load(), nCanceled.Load(), nCallErr.Load())
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g := st.Tier(GPU)
	if g.Extra["sequences"] != 0 || int(g.Extra["free"]) != g.Blocks || g.InFlight != 0 || st.Tier(Pinned).InFlight != 0 {
		t.Fatalf("after freeing all and Flush: %v sequences, %v of %d GPU blocks free, in flight GPU %d pinned %d",
			g.Extra["sequences"], g.Extra["free"], g.Blocks, g.InFlight, st.Tier(Pinned).InFlight)
	}
}
