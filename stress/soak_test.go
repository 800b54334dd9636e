package stress

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/kvtier/kvtier"
)

// TestSoak is the long run (KVTIER_SOAK=1): phases of random operations with
// copy faults injected, the model checked after every Flush barrier, until
// KVTIER_SOAK_OPS operations are done. Leaks would fail a barrier's check, so
// "leaks found" is 0 whenever it passes.
func TestSoak(t *testing.T) {
	if os.Getenv("KVTIER_SOAK") != "1" {
		t.Skip("set KVTIER_SOAK=1 for the long soak")
	}
	goroutines := envInt(t, "KVTIER_STRESS_GOROUTINES", 64)
	total := envInt(t, "KVTIER_SOAK_OPS", 1_000_000)
	perPhase := envInt(t, "KVTIER_STRESS_OPS", 100)
	f := &faults{rng: rand.New(rand.NewPCG(13, 13)), failH2D: 5, slowH2D: 5, failD2H: 5, slowD2H: 5, slow: 3 * time.Millisecond}
	dev := newFaultyDevice(t, f)
	defer dev.Close()
	cfg := kvtier.Config{Device: dev, ReadDeadlineBase: slowBuild * 2 * time.Millisecond, ReadDeadlinePerToken: slowBuild * time.Microsecond}
	if os.Getenv("KVTIER_SOAK_DISK") != "0" { // the disk tier too, unless asked not to
		cfg.PinnedBytes, cfg.DiskDir, cfg.DiskBytes = 48<<12, t.TempDir(), 4096*(8<<10)
	}
	m := newManager(t, cfg)
	defer m.Close(context.Background())
	w := &writers{}
	ws := make([]*worker, goroutines)
	for g := range ws {
		ws[g] = newWorker(m, w, g, tenants, 17)
	}
	start := time.Now()
	stop := func() {}
	t.Cleanup(func() { stop() }) // a phase's deadline, should the phase fail
	var c counts
	phases := 0
	for c.ops < total {
		ctx, cancel := context.WithTimeout(context.Background(), hangAfter)
		name := fmt.Sprintf("soak phase %d", phases)
		stop = armDeadline(t, t.Name()+": "+name, testDeadline) // a phase, not the whole soak
		failOn(t, name, runPhase(ctx, ws, perPhase, randomPhase))
		c = sumCounts(ws)
		st := checkQuiescent(t, ctx, m, name, &c)
		if int64(st.Tier(kvtier.GPU).Failed) != int64(c.failed)+f.d2hFailedBlocks.Load() {
			t.Fatalf("%s: GPU failed %d, outcomes %d + offload blocks %d", name, st.Tier(kvtier.GPU).Failed, c.failed, f.d2hFailedBlocks.Load())
		}
		cancel()
		stop()
		phases++
	}
	t.Logf("soak: %d ops by %d goroutines in %d phases, %v", c.ops, goroutines, phases, time.Since(start).Round(time.Second))
	t.Logf("blocks verified: %d (%d GPU hits, %d onboarded), %d written, %d hits skipped while written", c.verified, c.verifiedHit, c.verifiedOnboard, c.written, c.skippedBusy)
	t.Logf("faults injected: %v; outcomes: %d late, %d failed blocks", f, c.late, c.failed)
	if st, err := m.Stats(context.Background()); err == nil {
		t.Logf("tiers: %v; %v; %v", st.Tier(kvtier.GPU), st.Tier(kvtier.Pinned), st.Tier(kvtier.Disk))
	}
	t.Logf("leaks found: 0 (every barrier: all GPU blocks free, nothing in flight, pinned = index)")
}
