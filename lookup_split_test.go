package kvtier

import (
	"context"
	"os"
	"testing"
)

// TestLookupMatchesAllocate: Lookup "says what an allocation of the prompt
// would find now, per tier". When pinned memory holds the later blocks of a
// chain and the disk its first one (the pinned tier drained its least
// recent block to disk), an allocation loads the whole run (the index takes
// each block from whichever tier holds it: disk, pinned, pinned, pinned;
// all 16 tokens arrive valid), and so does Lookup count it. It used to
// count each tier's leading run on its own and report disk=4 only (review
// of 2026-11-27): a router, or group.Rank (which agrees its hit from
// Lookup), saw 4 of 16 tokens.
func TestLookupMatchesAllocate(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Config{GPUBlocks: 8, PinnedBytes: 4 * int64(os.Getpagesize()), DiskDir: t.TempDir(), DiskBytes: 1 << 20,
		Ingestion: IngestAll})
	chain := toks(500, 4*bt)
	if _, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: chain}); err != nil {
		t.Fatal(err)
	}
	// Computed in two chunks: the first two blocks reach pinned memory
	// first, the last two after them, draining the first two to disk.
	for _, n := range []int{2 * bt, 4 * bt} {
		if err := m.Commit(ctx, 1, n); err != nil {
			t.Fatal(err)
		}
		if err := m.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Free(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// Push the chain off the GPU.
	for i := range 1 {
		seq := uint64(10 + i)
		if _, err := m.Allocate(ctx, AllocRequest{Seq: seq, Tokens: toks(9000+i*1000, 8*bt)}); err != nil {
			t.Fatal(err)
		}
		if err := m.Free(ctx, seq); err != nil { // uncommitted: not written anywhere
			t.Fatal(err)
		}
	}
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := m.Exists(ctx, chain, "")
	if err != nil {
		t.Fatal(err)
	}
	res, _ := m.Residency(ctx)
	t.Logf("exists %v residency %v", p.Tokens, res)
	lr, err := m.Lookup(ctx, LookupRequest{Tokens: chain})
	if err != nil {
		t.Fatal(err)
	}
	ar, err := m.Allocate(ctx, AllocRequest{Seq: 2, Tokens: chain})
	if err != nil {
		t.Fatal(err)
	}
	<-ar.Ready.Done()
	t.Logf("lookup %v (skipped %v), allocate %v outcome %+v", lr.Tokens, lr.DoubleGetSkipped, ar.Tokens, ar.Ready.Outcome())
	if lr.Tokens != ar.Tokens {
		t.Errorf("Lookup %v, Allocate right after it %v", lr.Tokens, ar.Tokens)
	}
}
