package kvtier

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/kvtier/kvtier/gpu"
)

// TestDeleteInFlight: Delete right after Free, with every block written
// through GPU -> pinned -> disk (IngestAll on both links) and nothing
// flushed, removes every chain from every tier: writes, drains and loads
// still in flight included. The removal is durable: a restart on the same
// directory finds none of them.
func TestDeleteInFlight(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := diskConfig(t, dir)
	cfg.GPUBlocks, cfg.PinnedBytes = 64, 32*4096
	cfg.Ingestion, cfg.DiskIngestion = IngestAll, IngestAll
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const chains = 50
	prompt := func(i int) []int64 { return toks(1000*(i+1), 2*bt) }
	deleted := 0
	for i := range chains {
		p := prompt(i)
		r, err := m.Allocate(ctx, AllocRequest{Seq: uint64(i + 1), Tokens: p})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, r)
		writeBlocks(t, m, r.Blocks, p, "")
		if err := commitFree(ctx, m, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
		n, err := m.Delete(ctx, p, "") // the write-through is still in flight
		if err != nil {
			t.Fatal(err)
		}
		deleted += n
		if pr, err := m.Exists(ctx, p, ""); err != nil || pr != (Presence{}) {
			t.Fatalf("chain %d right after Delete: %+v %v", i, pr, err)
		}
	}
	if deleted < chains*2 {
		t.Fatalf("Delete reported %d blocks of %d chains of 2", deleted, chains)
	}
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range chains {
		if pr, err := m.Exists(ctx, prompt(i), ""); err != nil || pr != (Presence{}) {
			t.Fatalf("chain %d after the writes in flight landed: %+v %v", i, pr, err)
		}
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m = newManager(t, cfg)
	if st, _ := m.Stats(ctx); st.DiskOpen.Records != 0 {
		t.Fatalf("after a restart the disk holds %d records of deleted chains", st.DiskOpen.Records)
	}
}

// TestDeleteDuringLoad: a Delete that lands while a chain is being loaded
// from disk leaves it on no tier; the load's blocks that were deleted are a
// miss the caller recomputes (counted as Evicted), never published.
func TestDeleteDuringLoad(t *testing.T) {
	ctx := context.Background()
	cfg := diskConfig(t, t.TempDir())
	m := newManager(t, cfg)
	for round := range 20 {
		a := toks(100000*(round+1), 3*bt)
		pushDown(t, m, a)
		r, err := m.Allocate(ctx, AllocRequest{Seq: 777, Tokens: a})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Delete(ctx, a, ""); err != nil {
			t.Fatal(err)
		}
		out := wait(t, r)
		if out.ValidTokens+(out.Evicted+out.Late+out.Failed+out.Mismatch)*bt < r.Tokens.Sum() {
			t.Fatalf("round %d: the outcome does not account for what was loading: %+v of %+v", round, out, r)
		}
		if err := m.Free(ctx, 777); err != nil { // uncommitted: nothing is cached
			t.Fatal(err)
		}
		if err := m.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if pr, err := m.Exists(ctx, a, ""); err != nil || pr != (Presence{}) {
			t.Fatalf("round %d: after Delete during a load: %+v %v (outcome %+v)", round, pr, err, out)
		}
	}
}

// TestDeleteDuringOnboard: a Delete that lands while the chain is being
// copied up from pinned memory: the copy finishes, but its blocks are a miss
// (Evicted) for the caller and are never published on the GPU.
func TestDeleteDuringOnboard(t *testing.T) {
	ctx := context.Background()
	dev, release, _ := slowDevice(t)
	m := newManager(t, Config{GPUBlocks: 12, PinnedBytes: 1 << 20, Ingestion: IngestAll, Device: dev})
	a := toks(3, 3*bt)
	r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	writeBlocks(t, m, r.Blocks, a, "")
	if err := commitFree(ctx, m, 1); err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	evictAll(t, m, 12)
	r, err = m.Allocate(ctx, AllocRequest{Seq: 2, Tokens: a})
	if err != nil || r.Tokens.Of(Pinned) != 3*bt {
		t.Fatalf("%+v %v", r, err)
	}
	if _, err := m.Delete(ctx, a, ""); err != nil { // the copy up is held in the stream
		t.Fatal(err)
	}
	close(release)
	out := wait(t, r)
	if out.ValidTokens != 0 || out.Evicted != 3 {
		t.Fatalf("outcome %+v, want the 3 deleted blocks as Evicted", out)
	}
	if err := m.Free(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if pr, err := m.Exists(ctx, a, ""); err != nil || pr != (Presence{}) {
		t.Fatalf("after a Delete during the onboard: %+v %v", pr, err)
	}
}

// TestSerialOffloadsDeleteQueuedOffload: with SerialOffloads, a chain whose
// write-through waits in the GPU tier's queue behind another offload is
// deleted; once the offload ahead ends, the queued one must not carry the
// chain below, where the pinned tier's delete has already run. Without
// SerialOffloads the request reaches the pinned tier before the Delete.
func TestSerialOffloadsDeleteQueuedOffload(t *testing.T) {
	for _, serial := range []bool{false, true} {
		ctx := context.Background()
		release := make(chan struct{})
		dev, err := gpu.NewHost(gpu.HostConfig{Fault: func(dir gpu.Direction, ops []gpu.CopyOp) error {
			if dir == gpu.D2H {
				<-release // a's write-through holds the stream
			}
			return nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		m := newManager(t, Config{GPUBlocks: 16, PinnedBytes: 1 << 20, Ingestion: IngestAll, Device: dev, SerialOffloads: serial})
		a, b := toks(100, 2*bt), toks(900, 2*bt)
		for i, p := range [][]int64{a, b} {
			r, err := m.Allocate(ctx, AllocRequest{Seq: uint64(i + 1), Tokens: p})
			if err != nil {
				t.Fatal(err)
			}
			wait(t, r)
			writeBlocks(t, m, r.Blocks, p, "")
			if err := commitFree(ctx, m, uint64(i+1)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := m.Delete(ctx, b, ""); err != nil {
			t.Fatal(err)
		}
		close(release)
		if err := m.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if pr, err := m.Exists(ctx, b, ""); err != nil || pr != (Presence{}) {
			t.Errorf("serial %v: deleted chain after its queued write-through ran: %+v %v", serial, pr, err)
		}
		if pr, err := m.Exists(ctx, a, ""); err != nil || pr.Tokens.Below() != len(a) {
			t.Errorf("serial %v: the chain not deleted is not below: %+v %v", serial, pr, err)
		}
		m.Close(ctx)
		dev.Close()
	}
}

// cancelAfterFirstCheck is a context that is live at its first Err and
// canceled from then on (Done never closes): it ends right after the GPU
// actor took a call.
type cancelAfterFirstCheck struct {
	context.Context
	checks atomic.Int32
}

func (c *cancelAfterFirstCheck) Err() error {
	if c.checks.Add(1) > 1 {
		return context.Canceled
	}
	return nil
}

// TestDeleteRunsToItsEnd: once the GPU actor took a Delete, it goes on
// through every tier whatever its context, so the chain is not left served
// from pinned memory; and DeleteChain/ExistsChain reach a chain allocated
// under a LoRA adapter, which Delete and Exists (no adapter) do not name.
// Before, the delete stopped after the GPU with a bare context error, and
// such chains could not be deleted at all.
func TestDeleteRunsToItsEnd(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Config{GPUBlocks: 16, PinnedBytes: 1 << 20, Ingestion: IngestAll})
	a := toks(7, 2*bt)
	computeLoRA := func(seq uint64, tk []int64, lora string) {
		t.Helper()
		cycle(t, m, AllocRequest{Seq: seq, Tokens: tk, LoRA: lora})
	}
	computeLoRA(1, a, "")
	n, err := m.Delete(&cancelAfterFirstCheck{Context: ctx}, a, "")
	if err != nil || n != 4 {
		t.Fatalf("delete with a context ending after the GPU took it: %d blocks, %v; want 4 (GPU and pinned), nil", n, err)
	}
	if l, err := m.Lookup(ctx, LookupRequest{Tokens: a}); err != nil || l.Tokens.Of(GPU)+l.Tokens.Below() != 0 {
		t.Fatalf("after the delete: %+v, %v; want the chain nowhere", l.Tokens, err)
	}

	computeLoRA(2, a, "adapter")
	if p, err := m.Exists(ctx, a, ""); err != nil || p.Tokens.Of(GPU) != 0 {
		t.Fatalf("Exists without the adapter: %+v, %v", p, err)
	}
	if p, err := m.ExistsChain(ctx, Chain{Tokens: a, LoRA: "adapter"}); err != nil || p.Tokens.Of(GPU) != 2*bt || p.Tokens.Of(Pinned) != 2*bt {
		t.Fatalf("ExistsChain with the adapter: %+v, %v", p, err)
	}
	if n, err := m.DeleteChain(ctx, Chain{Tokens: a, LoRA: "adapter"}); err != nil || n != 4 {
		t.Fatalf("DeleteChain with the adapter: %d, %v", n, err)
	}
	if l, err := m.Lookup(ctx, LookupRequest{Tokens: a, LoRA: "adapter"}); err != nil || l.Tokens.Of(GPU)+l.Tokens.Below() != 0 {
		t.Fatalf("after DeleteChain: %+v, %v", l.Tokens, err)
	}
}
