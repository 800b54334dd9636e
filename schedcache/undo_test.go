package schedcache

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/scheduler"
)

// TestSyncAllocateCancelledFreesWhatItAllocated: with Sync, Allocate waits
// for the loads it started; if the caller's context ends meanwhile the call
// fails, and the sequences it allocated are freed, since the scheduler takes
// a failed call as allocating nothing (it used to leak them, and admitting
// the same id again failed with "sequence already allocated").
func TestSyncAllocateCancelledFreesWhatItAllocated(t *testing.T) {
	ctx := context.Background()
	gate := make(chan struct{})
	var gated atomic.Bool
	dev, err := gpu.NewHost(gpu.HostConfig{Fault: func(dir gpu.Direction, _ []gpu.CopyOp) error {
		if dir == gpu.H2D && gated.Load() {
			<-gate // the load hangs
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(t, kvtier.Config{GPUBlocks: 4, PinnedBytes: pinnedBytes(t, 32, blockTokens), Device: dev})
	c := New(m, Options{Sync: true})
	prompt := seqTokens(1000, 13)
	if o := allocOne(t, c, 1, prompt); o.Err != nil {
		t.Fatal(o.Err)
	}
	if err := c.Free(ctx, []scheduler.SeqID{1}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // push the prompt's blocks out of the GPU, into pinned memory
		id := scheduler.SeqID(10 + i)
		if o := allocOne(t, c, id, seqTokens(2000+100*i, 16)); o.Err != nil {
			t.Fatal(o.Err)
		}
		if err := c.Free(ctx, []scheduler.SeqID{id}); err != nil {
			t.Fatal(err)
		}
	}
	gated.Store(true)
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.Allocate(cctx, []scheduler.AllocReq{{Seq: 2, Tokens: prompt}})
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // past the deadline: the free waits behind the load
	close(gate)
	if err := <-done; err == nil {
		t.Fatal("Allocate did not fail when its context ended")
	}
	gated.Store(false)
	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.Tier(kvtier.GPU).Extra["sequences"]; n != 0 {
		t.Fatalf("after the failed Allocate the Manager holds %v sequences", n)
	}
	// The loads the failed Allocate started hold their blocks until they
	// land (the gate is open now); then all four are free again.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := m.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		g := st.Tier(kvtier.GPU)
		if g.InFlight == 0 && g.Extra["free"] == 4 { // free counts the cached free blocks too
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GPU blocks never came back after the failed Allocate: %d in flight, %v free, %v free cached",
				g.InFlight, g.Extra["free"], g.Extra["free_cached"])
		}
		time.Sleep(time.Millisecond)
	}
	if o := allocOne(t, c, 2, prompt); o.Err != nil {
		t.Fatalf("admitting sequence 2 again: %v", o.Err)
	}
}
