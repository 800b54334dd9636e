package stress

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/gpu"
)

// faults injects seeded failures and delays into a host device's copies.
type faults struct {
	mu  sync.Mutex
	rng *rand.Rand
	// Percentages per batch.
	failH2D, slowH2D, failD2H, slowD2H int
	slow                               time.Duration
	// Figures, by kind: batches and blocks.
	h2dFailed, h2dSlowed, d2hFailed, d2hSlowed atomic.Int64
	d2hFailedBlocks, h2dFailedBlocks           atomic.Int64
}

var errInjected = errors.New("stress: injected copy fault")

func (f *faults) hook(dir gpu.Direction, ops []gpu.CopyOp) error {
	f.mu.Lock()
	r := f.rng.IntN(100)
	f.mu.Unlock()
	fail, slow := f.failD2H, f.slowD2H
	if dir == gpu.H2D {
		fail, slow = f.failH2D, f.slowH2D
	}
	switch {
	case r < fail:
		if dir == gpu.H2D {
			f.h2dFailed.Add(1)
			f.h2dFailedBlocks.Add(int64(len(ops)))
		} else {
			f.d2hFailed.Add(1)
			f.d2hFailedBlocks.Add(int64(len(ops)))
		}
		return errInjected
	case r < fail+slow:
		if dir == gpu.H2D {
			f.h2dSlowed.Add(1)
		} else {
			f.d2hSlowed.Add(1)
		}
		<-time.After(f.slow) // the fault itself: a slow copy, not a synchronisation
	}
	return nil
}

func (f *faults) String() string {
	return fmt.Sprintf("h2d failed %d batches (%d blocks), h2d slowed %d, d2h failed %d batches (%d blocks), d2h slowed %d",
		f.h2dFailed.Load(), f.h2dFailedBlocks.Load(), f.h2dSlowed.Load(), f.d2hFailed.Load(), f.d2hFailedBlocks.Load(), f.d2hSlowed.Load())
}

func newFaultyDevice(t testing.TB, f *faults) gpu.Device {
	t.Helper()
	dev, err := gpu.NewHost(gpu.HostConfig{Fault: f.hook})
	if err != nil {
		t.Fatal(err)
	}
	return dev
}

// TestFaults: copies fail or miss their deadline at random. Allocation never
// errors for it, outcomes report Late and Failed, integrity holds (failed and
// late blocks are recomputed, never read), and the counters reconcile with the
// faults injected.
func TestFaults(t *testing.T) {
	deadline(t)
	goroutines := envInt(t, "KVTIER_STRESS_GOROUTINES", 64) / 2
	ops := envInt(t, "KVTIER_STRESS_OPS", 100)
	ctx, cancel := context.WithTimeout(context.Background(), hangAfter)
	defer cancel()
	f := &faults{rng: rand.New(rand.NewPCG(7, 7)), failH2D: 15, slowH2D: 15, failD2H: 10, slowD2H: 10, slow: slowBuild * 5 * time.Millisecond} // slowed copies outlast the scaled deadline in either build
	dev := newFaultyDevice(t, f)
	defer dev.Close()
	m := newManager(t, kvtier.Config{Device: dev, ReadDeadlineBase: slowBuild * 2 * time.Millisecond, ReadDeadlinePerToken: slowBuild * time.Microsecond})
	defer closeManager(t, m)
	w := &writers{}
	ws := make([]*worker, goroutines)
	for g := range ws {
		ws[g] = newWorker(m, w, g, tenants, 2)
	}
	var st kvtier.Stats
	for p := range 3 {
		name := fmt.Sprintf("faults phase %d", p)
		failOn(t, name, runPhase(ctx, ws, ops, randomPhase))
		c := sumCounts(ws)
		st = checkQuiescent(t, ctx, m, name, &c)
		// Every failed block is a failed onboard some allocation saw, or a
		// failed offload.
		if got, want := int64(st.Tier(kvtier.GPU).Failed), int64(c.failed)+f.d2hFailedBlocks.Load(); got != want {
			t.Fatalf("%s: GPU failed %d, want %d (outcomes %d + offload blocks %d)", name, got, want, c.failed, f.d2hFailedBlocks.Load())
		}
		if int64(c.failed) > f.h2dFailedBlocks.Load() {
			t.Fatalf("%s: outcomes report %d failed blocks, only %d failed to copy", name, c.failed, f.h2dFailedBlocks.Load())
		}
	}
	c := sumCounts(ws)
	if c.late == 0 || c.failed == 0 || f.d2hFailed.Load() == 0 {
		t.Errorf("faults never showed: late %d, failed %d, %v", c.late, c.failed, f)
	}
	t.Logf("%d goroutines: %d ops, %d allocations; %d blocks verified (%d onboarded), %d late, %d failed; faults: %v; %v",
		goroutines, c.ops, c.allocs, c.verified, c.verifiedOnboard, c.late, c.failed, f, st.Tier(kvtier.GPU))
}
