package stress

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvtier/kvtier"
)

// TestEarlyCommitsAndLateWrites runs the stress load with workers that act
// as an engine enqueueing its work ahead of it. Half their allocations try
// to commit before Ready, naming a fence: while loads from below are in
// flight (slowed at random here) the commit must be refused with
// ErrNotReady, and nothing else may refuse it; an accepted commit must find
// Ready complete when there were loads. A refused commit changes nothing:
// the worker commits again after Ready and writes, and the checks that
// follow (every load and hit against its prefix's bytes, the GPU's counters
// against what the workers saw) hold. Half the others commit before their
// KV is written, blocks still holding poison, with a fence signalled once
// the write lands: every commit writes through to pinned memory
// (IngestAll), and a copy down that did not wait for the fence would store
// poison, which a later load from below would bring back.
func TestEarlyCommitsAndLateWrites(t *testing.T) {
	deadline(t)
	goroutines := envInt(t, "KVTIER_STRESS_GOROUTINES", 64) / 2
	ops := envInt(t, "KVTIER_STRESS_OPS", 100)
	const phases = 3
	ctx, cancel := context.WithTimeout(context.Background(), hangAfter)
	defer cancel()
	f := &faults{rng: rand.New(rand.NewPCG(21, 21)), slowH2D: 30, slow: time.Millisecond}
	dev := newFaultyDevice(t, f)
	defer dev.Close()
	m := newManager(t, kvtier.Config{Device: dev, Ingestion: kvtier.IngestAll, ReadDeadlineBase: slowBuild * time.Second})
	defer closeManager(t, m)
	w := &writers{}
	ws := make([]*worker, goroutines)
	for g := range ws {
		ws[g] = newWorker(m, w, g, tenants, 5)
		ws[g].dev, ws[g].earlyCommits, ws[g].lateWrites = dev, true, true
	}
	var st kvtier.Stats
	for p := range phases {
		name := fmt.Sprintf("early/late phase %d", p)
		failOn(t, name, runPhase(ctx, ws, ops, randomPhase))
		c := sumCounts(ws)
		st = checkQuiescent(t, ctx, m, name, &c)
	}
	c := sumCounts(ws)
	if c.refused == 0 || c.early == 0 || c.lateWrites == 0 || c.verifiedOnboard == 0 {
		t.Errorf("a path was not exercised: %d commits refused before Ready, %d accepted, %d late writes, %d loads verified", c.refused, c.early, c.lateWrites, c.verifiedOnboard)
	}
	t.Logf("%d goroutines x %d phases: %d ops, %d allocations; commits before Ready: %d refused, %d accepted; %d late writes; blocks: %d written, %d verified (%d GPU hits, %d loads), %d hits skipped while written; faults %v; %v; %v",
		goroutines, phases, c.ops, c.allocs, c.refused, c.early, c.lateWrites, c.written, c.verified, c.verifiedHit, c.verifiedOnboard, c.skippedBusy, f, st.Tier(kvtier.GPU), st.Tier(kvtier.Pinned))
}
