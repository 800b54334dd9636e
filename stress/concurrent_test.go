package stress

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier"
)

const tenants = 4

// newManager returns a Manager small enough that eviction, offload ahead of need
// and pinned eviction all happen under the stress load; Close is the caller's
// (closeManager).
func newManager(t testing.TB, cfg kvtier.Config) *kvtier.Manager {
	t.Helper()
	cfg.BlockTokens = bt
	if cfg.GPUBlocks == 0 {
		cfg.GPUBlocks = 192
	}
	if cfg.PinnedBytes == 0 {
		cfg.PinnedBytes = 160 << 12 // 160 slots: pinned slots of gpu.TinySpec blocks take a 4 KiB page
	}
	if cfg.OffloadThreshold == 0 {
		cfg.OffloadThreshold = 0.3
	}
	if cfg.OffloadAhead == 0 {
		cfg.OffloadAhead = 8
	}
	m, err := kvtier.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// closeManager closes m at the end of a test (defer it), failing the test
// if Close does.
func closeManager(t testing.TB, m *kvtier.Manager) {
	t.Helper()
	if err := m.Close(context.Background()); err != nil {
		t.Errorf("close: %v", err)
	}
}

// runPhase runs one round on every worker concurrently and returns each
// goroutine's error (collected per goroutine, never shared).
func runPhase(ctx context.Context, ws []*worker, ops int, f func(context.Context, *worker, int) error) []error {
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, k := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(ctx, k, ops)
		}()
	}
	wg.Wait()
	return errs
}

func failOn(t *testing.T, phase string, errs []error) {
	t.Helper()
	n := 0
	for _, err := range errs {
		if err != nil {
			if n < 5 {
				t.Errorf("%s: %v", phase, err)
			}
			n++
		}
	}
	if n > 0 {
		t.Fatalf("%s: %d goroutines failed", phase, n)
	}
}

// drainWait bounds checkQuiescent's wait for disk reads given up at their
// deadline to finish in the background.
const drainWait = 10 * time.Second

// checkQuiescent is the model check after a Flush barrier with no sequence live:
// every GPU block is free (no reference, no pin), nothing is in flight, the
// pinned tier and the index agree, and the GPU's counters match what the
// workers saw.
func checkQuiescent(t *testing.T, ctx context.Context, m *kvtier.Manager, phase string, total *counts) kvtier.Stats {
	t.Helper()
	if err := m.Flush(ctx); err != nil {
		t.Fatalf("%s: flush: %v", phase, err)
	}
	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatalf("%s: stats: %v", phase, err)
	}
	// A disk read answered at its deadline still finishes its I/O in the
	// background (Flush waits for writes, not reads): let those drain. A
	// leaked count never does, and fails below after the wait.
	for end := time.Now().Add(drainWait); st.Tier(kvtier.Disk).InFlight != 0 && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
		if st, err = m.Stats(ctx); err != nil {
			t.Fatalf("%s: stats: %v", phase, err)
		}
	}
	g, p := st.Tier(kvtier.GPU), st.Tier(kvtier.Pinned)
	var bad []string
	if g.Extra["sequences"] != 0 {
		bad = append(bad, fmt.Sprintf("%v sequences live, want 0", g.Extra["sequences"]))
	}
	if int(g.Extra["free"]) != g.Blocks {
		bad = append(bad, fmt.Sprintf("GPU: %v free of %d blocks with no sequence live (leaked references or pins)", g.Extra["free"], g.Blocks))
	}
	if g.InFlight != 0 || p.InFlight != 0 {
		bad = append(bad, fmt.Sprintf("in flight after Flush: GPU %d, pinned %d", g.InFlight, p.InFlight))
	}
	d := st.Tier(kvtier.Disk)
	switch {
	case p.UsedBlocks != int(p.Extra["resident"]) || p.UsedBlocks > p.Blocks:
		bad = append(bad, fmt.Sprintf("pinned used %d, resident %v, capacity %d", p.UsedBlocks, p.Extra["resident"], p.Blocks))
	case d.Blocks == 0 && st.IndexBlocks != p.UsedBlocks:
		bad = append(bad, fmt.Sprintf("index knows %d blocks, pinned holds %d", st.IndexBlocks, p.UsedBlocks))
	case d.Blocks > 0 && (st.IndexBlocks < max(p.UsedBlocks, d.UsedBlocks) || st.IndexBlocks > p.UsedBlocks+d.UsedBlocks):
		bad = append(bad, fmt.Sprintf("index knows %d blocks, pinned holds %d and disk %d", st.IndexBlocks, p.UsedBlocks, d.UsedBlocks))
	case d.InFlight != 0 || d.UsedBlocks > d.Blocks:
		bad = append(bad, fmt.Sprintf("disk: %d in flight after Flush, %d of %d blocks used", d.InFlight, d.UsedBlocks, d.Blocks))
	}
	if g.UsedBlocks != int(g.Extra["free_cached"]) {
		bad = append(bad, fmt.Sprintf("GPU used %d != free cached %v with no sequence live", g.UsedBlocks, g.Extra["free_cached"]))
	}
	if total != nil {
		if int(g.Hits+g.Misses) != total.allocBlocks {
			bad = append(bad, fmt.Sprintf("GPU hits+misses %d, workers allocated %d blocks", g.Hits+g.Misses, total.allocBlocks))
		}
		if int(g.Hits) != total.hitBlocks {
			bad = append(bad, fmt.Sprintf("GPU hits %d, workers saw %d hit blocks", g.Hits, total.hitBlocks))
		}
		if int(g.Onboarded) != total.onboarded {
			bad = append(bad, fmt.Sprintf("GPU onboarded %d, workers saw %d loaded blocks", g.Onboarded, total.onboarded))
		}
		if int(g.Timeouts) != total.late {
			bad = append(bad, fmt.Sprintf("GPU timeouts %d, workers saw %d late blocks", g.Timeouts, total.late))
		}
	}
	for _, b := range bad {
		t.Errorf("%s: %s", phase, b)
	}
	if len(bad) > 0 {
		t.Fatalf("%s: stats %v / %v", phase, g, p)
	}
	return st
}

// isolationPhase: one goroutine per tenant allocates every shared stem, all
// tenants at once on identical tokens, each the first of its tenant to do so:
// any hit is a block of another tenant.
func isolationPhase(ctx context.Context, k *worker, _ int) error {
	for i := range numStems {
		k.next++
		seq := uint64(k.g)<<32 | k.next
		if err := k.allocate(ctx, seq, stem(i), true /* wantMiss */); err != nil {
			return err
		}
		if err := k.free(ctx, len(k.live)-1); err != nil {
			return err
		}
	}
	return nil
}

func randomPhase(ctx context.Context, k *worker, ops int) error { return k.round(ctx, ops) }

// TestConcurrentManager drives one Manager from many goroutines in phases
// separated by Flush barriers, checking data integrity as it goes and the model
// after each barrier.
func TestConcurrentManager(t *testing.T) {
	deadline(t)
	runConcurrent(t, kvtier.Config{})
}

// TestConcurrentManagerSerialOffloads runs the same load with one GPU ->
// pinned offload in flight at a time, so offloads and loads queue in the
// GPU tier, and Deletes reach chains whose offloads wait there.
func TestConcurrentManagerSerialOffloads(t *testing.T) {
	deadline(t)
	runConcurrent(t, kvtier.Config{SerialOffloads: true})
}

// TestConcurrentManagerWithDisk adds the disk tier below a small pinned tier, so
// blocks drain to disk and come back disk -> pinned -> GPU under the load.
func TestConcurrentManagerWithDisk(t *testing.T) {
	deadline(t)
	st := runConcurrent(t, kvtier.Config{PinnedBytes: 48 << 12, DiskDir: t.TempDir(), DiskBytes: 4096 * (8 << 10)})
	if st.Tier(kvtier.Disk).Offloaded == 0 || st.Tier(kvtier.Disk).Onboarded == 0 {
		t.Errorf("the disk tier was not exercised: %v", st.Tier(kvtier.Disk))
	}
}

func runConcurrent(t *testing.T, cfg kvtier.Config) kvtier.Stats {
	goroutines := envInt(t, "KVTIER_STRESS_GOROUTINES", 64)
	ops := envInt(t, "KVTIER_STRESS_OPS", 100)
	const phases = 4
	ctx, cancel := context.WithTimeout(context.Background(), hangAfter)
	defer cancel()
	m := newManager(t, cfg)
	defer closeManager(t, m)
	w := &writers{}
	ws := make([]*worker, goroutines)
	for g := range ws {
		ws[g] = newWorker(m, w, g, tenants, 1)
	}
	sum := func() *counts {
		c := sumCounts(ws)
		return &c
	}
	first := ws[:min(tenants, len(ws))]
	failOn(t, "isolation", runPhase(ctx, first, 0, isolationPhase))
	checkQuiescent(t, ctx, m, "isolation", sum())
	var st kvtier.Stats
	for p := range phases {
		name := fmt.Sprintf("phase %d", p)
		failOn(t, name, runPhase(ctx, ws, ops, randomPhase))
		st = checkQuiescent(t, ctx, m, name, sum())
	}
	// Exact checks on the state the load left.
	pr := newProber(m)
	if err := pr.freeOrder(ctx); err != nil {
		t.Error(err)
	}
	if cfg.DiskDir != "" {
		if err := pr.demand(ctx); err != nil {
			t.Error(err)
		}
	}
	c := sum()
	if c.classed == 0 {
		t.Errorf("no free was preceded by a class commit (%d frees)", c.frees)
	}
	if c.verified == 0 || c.verifiedOnboard == 0 {
		t.Errorf("verified %d blocks (%d onboarded): the load never exercised the lower tier", c.verified, c.verifiedOnboard)
	}
	if st.Tier(kvtier.GPU).Evictions == 0 || st.Tier(kvtier.GPU).Offloaded == 0 {
		t.Errorf("no eviction or offload: %v", st.Tier(kvtier.GPU))
	}
	t.Logf("%d goroutines x %d phases: %d ops (%d allocations, %d no space, %d appends, %d frees (%d with a class), %d exists, %d deletes, %d prefetches)",
		goroutines, phases, c.ops, c.allocs, c.noSpace, c.appends, c.frees, c.classed, c.exists, c.deletes, c.prefetches)
	t.Logf("blocks: %d written, %d verified (%d GPU hits, %d onboarded), %d hits skipped while written; %v; %v; %v",
		c.written, c.verified, c.verifiedHit, c.verifiedOnboard, c.skippedBusy, st.Tier(kvtier.GPU), st.Tier(kvtier.Pinned), st.Tier(kvtier.Disk))
	return st
}
