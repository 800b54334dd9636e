package kvtier

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestLoadIntoFreedBlockWaitsForItsPass: an engine commits a chunk ending
// mid-block once its pass is enqueued (CommitBatch naming the pass's
// fence) and frees the sequence at once, preempted while the pass still
// runs. The partial block, never published, heads the free queue, and the
// next allocation loads another prompt from pinned memory into it. The
// load's copy up must wait for the fence: the pass writes the block when
// it runs, and a copy that landed first would be overwritten under the
// loaded prefix, which the load makes a hit.
func TestLoadIntoFreedBlockWaitsForItsPass(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Config{GPUBlocks: 4, PinnedBytes: 1 << 20, ReadDeadlineBase: -1})
	q := toks(300, 2*bt)
	r, err := m.Allocate(ctx, AllocRequest{Seq: 10, Tokens: q})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r)
	writeBlocks(t, m, r.Blocks, q, "")
	if err := m.Commit(ctx, 10, AllTokens); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Swap(ctx, []uint64{10}); err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	evictAll(t, m, 4) // q is in pinned memory only
	p := toks(7, 2*bt)
	r1, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: p})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r1)
	f := signalFence(t, m) // the pass is enqueued, not run
	if errs, err := m.CommitBatch(ctx, []CommitItem{{Seq: 1, Tokens: bt + bt/2, After: f}}); err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
	partial := r1.Blocks[1]
	if err := m.Free(ctx, 1); err != nil {
		t.Fatal(err)
	}
	r2, err := m.Allocate(ctx, AllocRequest{Seq: 2, Tokens: q})
	if err != nil || r2.Tokens.Of(Pinned) != 2*bt {
		t.Fatalf("allocation of q: %+v %v", r2, err)
	}
	if !slices.Contains(r2.Blocks, partial) {
		t.Fatalf("q loads into %v, not the freed partial block %d: the probe needs it", r2.Blocks, partial)
	}
	select { // a copy up that did not wait lands now
	case <-r2.Ready.Done():
	case <-time.After(300 * time.Millisecond):
	}
	// The pass runs: it writes the partial block, and the engine signals.
	if err := m.Arena().WriteBlock(int(partial), 0, pattern(m.Layout(), 12345)); err != nil {
		t.Fatal(err)
	}
	f.Signal()
	if out := wait(t, r2); out.ValidTokens != 2*bt {
		t.Fatalf("load of q: %+v", out)
	}
	checkBlocks(t, m, r2.Blocks, q, "", 2)
}
