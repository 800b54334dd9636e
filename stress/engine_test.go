package stress

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/internal/enginetest"
	"github.com/kvtier/kvtier/refengine"
)

// TestReferenceEngine runs the reference transformer (internal/enginetest)
// from many goroutines at once against one Manager with pinned memory and
// disk, whose copies fail or run slow at random and whose loads miss a short
// deadline: interleaved requests over shared stems, chunked prefill,
// preemption by swap and by recompute, aborts with garbage. Every logit
// equals a recompute with no cache. After each phase a Flush barrier and
// the quiescence model check; between phases the GPU is emptied, so the next
// phase loads from the tiers below.
func TestReferenceEngine(t *testing.T) {
	deadline(t)
	goroutines := max(envInt(t, "KVTIER_STRESS_GOROUTINES", 64)/8, 2)
	rounds := max(envInt(t, "KVTIER_STRESS_OPS", 100)/20, 1)
	const phases = 3
	ctx, cancel := context.WithTimeout(context.Background(), hangAfter)
	defer cancel()
	f := &faults{rng: rand.New(rand.NewPCG(9, 9)), failH2D: 10, slowH2D: 10, failD2H: 10, slowD2H: 10, slow: 5 * time.Millisecond}
	dev := newFaultyDevice(t, f)
	defer dev.Close()
	model, err := enginetest.NewModel()
	if err != nil {
		t.Fatal(err)
	}
	gpuBlocks := max(192, 16*goroutines) // two live requests of at most 7 blocks a goroutine
	cfg, err := enginetest.Config(bt, gpuBlocks, 48, gpu.LayerSeparate)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Device, cfg.DiskDir, cfg.DiskBytes = dev, t.TempDir(), 1<<22
	cfg.ReadDeadlineBase, cfg.ReadDeadlinePerToken = 2*time.Millisecond, time.Microsecond
	m := newManager(t, cfg)
	defer closeManager(t, m)
	p := enginetest.NewPrompts(13, refengine.TinyConfig.Vocab, bt, 3)
	var total enginetest.Tally
	for ph := range phases {
		name := fmt.Sprintf("engine phase %d", ph)
		errs := make([]error, goroutines)
		tallies := make([]enginetest.Tally, goroutines)
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Half the goroutines give their loads all the time they need,
				// half a deadline already past when the grant comes: both
				// outcomes show however loaded the machine (a 2 ms deadline
				// for all left none loaded under CI's parallel packages).
				eng := &enginetest.Engine{M: m, Model: model, LoadTimeout: 10 * time.Second}
				if g%2 == 1 {
					eng.LoadTimeout = time.Microsecond
				}
				tallies[g], errs[g] = enginetest.Mixed(ctx, eng, p, uint64(g), uint64(ph), rounds)
			}()
		}
		wg.Wait()
		failOn(t, name, errs)
		for _, x := range tallies {
			total.Add(x)
		}
		checkQuiescent(t, ctx, m, name, nil)
		if err := enginetest.EvictGPU(ctx, m, p, 1<<40, gpuBlocks); err != nil {
			t.Fatal(err)
		}
	}
	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if total.Promised.Of(kvtier.GPU) == 0 || total.Loaded == 0 || total.Late+total.Failed == 0 {
		t.Errorf("a path was not exercised: %v; faults %v", total, f)
	}
	t.Logf("%d goroutines x %d phases x %d rounds: %v; faults %v; %v; %v; %v", goroutines, phases, rounds, total, f, st.Tier(kvtier.GPU), st.Tier(kvtier.Pinned), st.Tier(kvtier.Disk))
}
