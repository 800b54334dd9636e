package blockpool

import (
	"errors"
	"math"
	"slices"
	"testing"
	"unsafe"

	"github.com/kvtier/kvtier/prefixhash"
)

func newPool(t testing.TB, blocks, size int) *Pool {
	t.Helper()
	p, err := New(Config{NumBlocks: blocks, BlockSize: size})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func check(t testing.TB, p *Pool) {
	t.Helper()
	if err := p.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

func seq(n int, base int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = base + int64(i)
	}
	return out
}

func TestBlockMetadataSize(t *testing.T) {
	if s := unsafe.Sizeof(block{}); s > 64 {
		t.Fatalf("block metadata is %d bytes, budget 64", s)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{{NumBlocks: 0, BlockSize: 4}, {NumBlocks: 4, BlockSize: 0}, {NumBlocks: 4, BlockSize: -1}, {NumBlocks: 4, BlockSize: 4, VocabSize: -1}} {
		if _, err := New(c); !errors.Is(err, ErrBadConfig) {
			t.Fatalf("%+v: got %v, want ErrBadConfig", c, err)
		}
	}
}

// TestSharedPrefix is seed 000's example: two sequences sharing a full first block
// share its block id, with ref count 2 and one block of cached tokens.
func TestSharedPrefix(t *testing.T) {
	p := newPool(t, 8, 4)
	a, err := allocCommit(p, 1, []int64{1, 2, 3, 4, 5, 6}, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := allocCommit(p, 2, []int64{1, 2, 3, 4, 7, 8, 9}, "")
	if err != nil {
		t.Fatal(err)
	}
	if a.Blocks[0] != b.Blocks[0] || a.Blocks[1] == b.Blocks[1] {
		t.Fatalf("tables %v and %v: want a shared first block only", a.Blocks, b.Blocks)
	}
	if p.RefCount(a.Blocks[0]) != 2 {
		t.Fatalf("shared block ref %d, want 2", p.RefCount(a.Blocks[0]))
	}
	if a.CachedTokens != 0 || b.CachedTokens != 4 {
		t.Fatalf("cached tokens %d and %d, want 0 and 4", a.CachedTokens, b.CachedTokens)
	}
	check(t, p)
}

func TestHitConfirmedByTokens(t *testing.T) {
	p := newPool(t, 8, 2)
	a, _ := allocCommit(p, 1, []int64{1, 2, 3, 4}, "")
	// Forge a collision: point the second block's hash at different tokens.
	b := &p.blocks[a.Blocks[1]]
	b.tokens[0] = 99
	r, err := allocCommit(p, 2, []int64{1, 2, 3, 4}, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.HitBlocks != 1 {
		t.Fatalf("a hash hit with different tokens was served: %d hit blocks", r.HitBlocks)
	}
}

func TestRevivalOfFreedCachedBlock(t *testing.T) {
	p := newPool(t, 4, 2)
	a, _ := allocCommit(p, 1, []int64{1, 2, 3, 4}, "")
	if err := p.Deallocate(1); err != nil {
		t.Fatal(err)
	}
	if p.NumFree() != 4 || p.Stats().FreeCached != 2 {
		t.Fatalf("free %d, free cached %d", p.NumFree(), p.Stats().FreeCached)
	}
	b, err := allocCommit(p, 2, []int64{1, 2, 3, 4, 5}, "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Blocks, b.Blocks[:2]) || b.CachedTokens != 4 || p.Stats().Revived != 2 {
		t.Fatalf("tables %v %v, cached %d, stats %+v", a.Blocks, b.Blocks, b.CachedTokens, p.Stats())
	}
	check(t, p)
}

func TestMissStopsLaterHits(t *testing.T) {
	p := newPool(t, 16, 2)
	allocCommit(p, 1, []int64{1, 2, 3, 4, 5, 6}, "")
	r, _ := allocCommit(p, 2, []int64{1, 2, 9, 9, 5, 6}, "")
	if r.HitBlocks != 1 {
		t.Fatalf("hit blocks %d, want 1", r.HitBlocks)
	}
}

func TestMayAppendThreeCases(t *testing.T) {
	p := newPool(t, 8, 4)
	a, _ := allocCommit(p, 1, []int64{1, 2, 3}, "")
	if len(a.Blocks) != 1 {
		t.Fatal(a.Blocks)
	}
	// Case: the token fills the last block -> hashed, findable once committed.
	if err := p.MayAppend(1, 4); err != nil {
		t.Fatal(err)
	}
	var h prefixhash.Hasher
	want := h.Chain(nil, "", []int64{1, 2, 3, 4}, 4)[0]
	if got, cached := p.BlockHash(a.Blocks[0]); got != want || cached {
		t.Fatalf("filled block hash %x cached %v, want %x uncommitted", got, cached, want)
	}
	if got, _ := p.Commit(1, 4, nil); !slices.Equal(got, a.Blocks[:1]) {
		t.Fatalf("commit published %v, want %v", got, a.Blocks[:1])
	}
	if _, cached := p.BlockHash(a.Blocks[0]); !cached {
		t.Fatal("committed block not findable")
	}
	// Case: the last block was full -> a new block.
	free := p.NumFree()
	if ok, _ := p.CanAppend(1); !ok {
		t.Fatal("CanAppend false with free blocks")
	}
	if err := p.MayAppend(1, 5); err != nil {
		t.Fatal(err)
	}
	tbl, _ := p.Table(nil, 1)
	if len(tbl) != 2 || p.NumFree() != free-1 {
		t.Fatalf("table %v free %d", tbl, p.NumFree())
	}
	if _, cached := p.BlockHash(tbl[1]); cached {
		t.Fatal("a partial block is cached")
	}
	// Case: neither -> nothing allocated or hashed.
	if err := p.MayAppend(1, 6); err != nil {
		t.Fatal(err)
	}
	if p.NumFree() != free-1 {
		t.Fatal("a mid-block token took a block")
	}
	// The chain continues from the first block: filling block 2 matches a fresh hash.
	p.MayAppend(1, 7)
	p.MayAppend(1, 8)
	chain := h.Chain(nil, "", []int64{1, 2, 3, 4, 5, 6, 7, 8}, 4)
	if got, _ := p.BlockHash(tbl[1]); got != chain[1] {
		t.Fatalf("second block hash %x, want %x", got, chain[1])
	}
	check(t, p)
}

func TestCanAppendWhenFull(t *testing.T) {
	p := newPool(t, 1, 2)
	allocCommit(p, 1, []int64{1, 2}, "")
	if ok, _ := p.CanAppend(1); ok {
		t.Fatal("CanAppend true with no free block and a full last block")
	}
	err := p.MayAppend(1, 3)
	var ns *NoSpaceError
	if !errors.As(err, &ns) || ns.Needed != 1 || ns.Free != 0 {
		t.Fatalf("got %v", err)
	}
	if n, _ := p.NumTokens(1); n != 2 {
		t.Fatalf("a failed append changed the sequence: %d tokens", n)
	}
	check(t, p)
}

// TestLRUEviction: among freed cached blocks the least recently freed goes first,
// and within one sequence the tail goes before the head.
func TestLRUEviction(t *testing.T) {
	p := newPool(t, 4, 1)
	a, _ := allocCommit(p, 1, []int64{10, 11}, "")
	b, _ := allocCommit(p, 2, []int64{20, 21}, "")
	p.Deallocate(1)
	p.Deallocate(2)
	allocCommit(p, 3, []int64{30}, "")
	ev := p.DrainEvicted(nil)
	if len(ev) != 1 || ev[0].Block != a.Blocks[1] {
		t.Fatalf("first eviction %v, want seq 1's tail block %d", ev, a.Blocks[1])
	}
	allocCommit(p, 4, []int64{40, 41}, "")
	ev = p.DrainEvicted(nil)
	if len(ev) != 2 || ev[0].Block != a.Blocks[0] || ev[1].Block != b.Blocks[1] {
		t.Fatalf("evictions %v, want %d then %d", ev, a.Blocks[0], b.Blocks[1])
	}
	// seq 2's head is still cached.
	r, _ := allocCommit(p, 5, []int64{20}, "")
	if r.HitBlocks != 1 || r.Blocks[0] != b.Blocks[0] {
		t.Fatalf("seq 2's head was not kept: %+v", r)
	}
	check(t, p)
}

func TestUncachedFreedBlocksAreReusedFirst(t *testing.T) {
	p := newPool(t, 3, 2)
	allocCommit(p, 1, []int64{1, 2}, "") // one cached block
	allocCommit(p, 2, []int64{3}, "")    // one partial block
	p.Deallocate(1)
	p.Deallocate(2)
	allocCommit(p, 3, []int64{5, 6, 7}, "") // needs 2 blocks: the partial and the never-used one
	if ev := p.DrainEvicted(nil); len(ev) != 0 {
		t.Fatalf("evicted %v while uncached blocks were free", ev)
	}
	check(t, p)
}

func TestBadInputChangesNothing(t *testing.T) {
	p, _ := New(Config{NumBlocks: 4, BlockSize: 2, VocabSize: 100})
	allocCommit(p, 1, []int64{1, 2, 3}, "")
	// CanAllocate agrees with Allocate on what it refuses (it said yes).
	for _, c := range []struct {
		seq    SeqID
		tokens []int64
	}{{2, nil}, {1, []int64{1}}, {2, []int64{1, 100}}} {
		if p.CanAllocate(c.seq, c.tokens, "") {
			t.Errorf("CanAllocate(%d, %v) = true for what Allocate refuses", c.seq, c.tokens)
		}
	}
	if !p.CanAllocate(2, []int64{1, 2}, "") {
		t.Error("CanAllocate of a valid request that fits = false")
	}
	before := p.Stats()
	cases := []struct {
		err error
		fn  func() error
	}{
		{ErrEmptySequence, func() error { _, err := allocCommit(p, 2, nil, ""); return err }},
		{ErrSequenceExists, func() error { _, err := allocCommit(p, 1, []int64{1}, ""); return err }},
		{ErrTokenOutOfRange, func() error { _, err := allocCommit(p, 2, []int64{1, 100}, ""); return err }},
		{ErrTokenOutOfRange, func() error { _, err := allocCommit(p, 2, []int64{-1}, ""); return err }},
		{ErrNoSpace, func() error { _, err := allocCommit(p, 2, seq(9, 0), ""); return err }},
		{ErrUnknownSequence, func() error { return p.Deallocate(7) }},
		{ErrUnknownSequence, func() error { return p.MayAppend(7, 1) }},
		{ErrTokenOutOfRange, func() error { return p.MayAppend(1, 1000) }},
		{ErrNoSpace, func() error { _, err := p.AppendTokens(1, seq(9, 0), 0, nil); return err }},
		{ErrNoSpace, func() error { return p.Reserve(9, 5) }},
		{ErrBadArgument, func() error { return p.Reserve(9, 0) }},
		{ErrUnknownReservation, func() error { return p.Release(9) }},
		// A lookahead no pool could hold (near math.MaxInt it wrapped the
		// block count below zero: a sequence with no blocks, or a panic).
		{ErrNoSpace, func() error {
			_, err := p.AllocateRequest(Request{Seq: 2, Tokens: []int64{1, 2, 3}, Lookahead: math.MaxInt})
			return err
		}},
		{ErrNoSpace, func() error { _, err := p.AppendTokens(1, []int64{9}, math.MaxInt-8, nil); return err }},
		{ErrNoSpace, func() error { _, err := p.AppendTokens(1, []int64{9}, 9, nil); return err }},
		{ErrBadArgument, func() error { _, err := p.AppendTokens(1, []int64{9}, -1, nil); return err }},
		{ErrBadArgument, func() error { _, err := p.CachedChain(nil, []int64{1, 2}, nil); return err }},
		{ErrBadArgument, func() error { _, err := p.CachedBlocks([]int64{1, 2}, nil); return err }},
	}
	for i, c := range cases {
		if err := c.fn(); !errors.Is(err, c.err) {
			t.Fatalf("case %d: got %v, want %v", i, err, c.err)
		}
		if after := p.Stats(); after != before {
			t.Fatalf("case %d changed the pool: %+v -> %+v", i, before, after)
		}
		check(t, p)
	}
	var ns *NoSpaceError
	_, err := allocCommit(p, 2, seq(9, 0), "")
	if !errors.As(err, &ns) || ns.Needed != 5 || ns.Free != 2 {
		t.Fatalf("no-space error %v, want needed 5 free 2", err)
	}
	if err := p.Deallocate(1); err != nil {
		t.Fatal(err)
	}
	if err := p.Deallocate(1); !errors.Is(err, ErrUnknownSequence) {
		t.Fatalf("double free: %v", err)
	}
}

func TestReserveRelease(t *testing.T) {
	p := newPool(t, 6, 2)
	if err := p.Reserve(1, 4); err != nil {
		t.Fatal(err)
	}
	if err := p.Reserve(1, 1); !errors.Is(err, ErrReservationExists) {
		t.Fatal(err)
	}
	if _, err := allocCommit(p, 2, seq(6, 0), ""); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("reserved blocks were handed to another sequence: %v", err)
	}
	// Sequence 1 draws on its own reservation: 3 blocks from it, none from the queue.
	if _, err := allocCommit(p, 1, seq(6, 0), ""); err != nil {
		t.Fatal(err)
	}
	if p.Reserved(1) != 1 || p.NumFree() != 2 {
		t.Fatalf("reserved %d free %d", p.Reserved(1), p.NumFree())
	}
	check(t, p)
	if err := p.Release(1); err != nil {
		t.Fatal(err)
	}
	if p.NumFree() != 3 || p.Stats().Reserved != 0 {
		t.Fatalf("after release: free %d, %+v", p.NumFree(), p.Stats())
	}
	check(t, p)
}

func TestSaltSeparatesTenants(t *testing.T) {
	p := newPool(t, 8, 2)
	allocCommit(p, 1, []int64{1, 2, 3, 4}, "a")
	r, _ := allocCommit(p, 2, []int64{1, 2, 3, 4}, "b")
	if r.HitBlocks != 0 {
		t.Fatal("tenant b hit tenant a's blocks")
	}
	r, _ = allocCommit(p, 3, []int64{1, 2, 3, 4}, "a")
	if r.HitBlocks != 2 {
		t.Fatalf("tenant a missed its own blocks: %d", r.HitBlocks)
	}
}

func TestRefCountUnderflowPanics(t *testing.T) {
	p := newPool(t, 2, 2)
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("no panic")
		} else if s, _ := r.(string); len(s) < 7 || s[:7] != "kvtier:" {
			t.Fatalf("panic %v lacks the kvtier: prefix", r)
		}
	}()
	p.unhold(0)
}

func TestPinDetachRecache(t *testing.T) {
	p := newPool(t, 4, 2)
	a, _ := p.Allocate(1, []int64{1, 2, 3, 4}, "")
	if _, err := p.Commit(1, 2, nil); err != nil { // block 0 computed, block 1 loading
		t.Fatal(err)
	}
	p.Pin(a.Blocks[1])
	fresh, err := p.Detach(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	tbl, _ := p.Table(nil, 1)
	if tbl[1] != fresh || fresh == a.Blocks[1] || p.RefCount(a.Blocks[1]) != 1 {
		t.Fatalf("table %v fresh %d old ref %d", tbl, fresh, p.RefCount(a.Blocks[1]))
	}
	check(t, p)
	p.Unpin(a.Blocks[1])
	if p.RefCount(a.Blocks[1]) != 0 || p.NumFree() != 2 {
		t.Fatalf("old block ref %d free %d", p.RefCount(a.Blocks[1]), p.NumFree())
	}
	p.Recache(fresh)
	if id, ok := p.Lookup(p.scratch[0]); !ok || id != a.Blocks[0] {
		t.Fatal("first block lost")
	}
	if _, cached := p.BlockHash(fresh); !cached {
		t.Fatal("recache of the fresh block did not register it")
	}
	check(t, p)
	// A pinned free block is not reused.
	p.Deallocate(1)
	p.Pin(a.Blocks[0])
	if _, err := allocCommit(p, 2, seq(8, 50), ""); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("allocation took a pinned block: %v", err)
	}
	p.Unpin(a.Blocks[0])
	check(t, p)
}

// allocCommit allocates and commits the whole prompt, as an engine does once
// its prefill has run.
func allocCommit(p *Pool, id SeqID, tokens []int64, salt string) (Allocation, error) {
	a, err := p.Allocate(id, tokens, salt)
	if err == nil {
		_, err = p.Commit(id, len(tokens), nil)
	}
	return a, err
}

// TestPinKeepsFreeQueuePlace: a copy pinning a free block (an offload ahead
// of need) leaves its place in the eviction order as it was. While pinned the
// block is neither taken nor counted free; after Unpin it is still the next
// to be evicted, not the last. A sequence that hits it while pinned takes it
// out of the queue.
func TestPinKeepsFreeQueuePlace(t *testing.T) {
	p := newPool(t, 4, 2)
	if _, err := allocCommit(p, 1, []int64{1, 2, 3, 4, 5, 6, 7, 8}, ""); err != nil {
		t.Fatal(err)
	}
	p.Deallocate(1) // four free cached blocks
	var order []BlockID
	p.FreeCached(func(id BlockID, _ prefixhash.Hash) bool { order = append(order, id); return true })
	first := order[0] // the next to be evicted
	p.Pin(first)
	if p.NumFree() != 3 {
		t.Fatalf("NumFree %d with one of four free blocks pinned, want 3", p.NumFree())
	}
	check(t, p)
	b, err := allocCommit(p, 2, []int64{10, 11}, "") // evicts one block: not the pinned one
	if err != nil {
		t.Fatal(err)
	}
	if b.Blocks[0] != order[1] {
		t.Fatalf("allocation took block %d, want %d (the first not pinned)", b.Blocks[0], order[1])
	}
	p.Unpin(first)
	check(t, p)
	c, err := allocCommit(p, 3, []int64{20, 21}, "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Blocks[0] != first {
		t.Fatalf("after Unpin the allocation took block %d, want %d: a copy must not move a block to the back", c.Blocks[0], first)
	}
	check(t, p)
	// Pinned, then hit by a sequence: it leaves the queue (NumFree does not
	// count it twice) and comes back when both let go.
	hit := order[3] // the chain's first block: the last evicted
	p.Pin(hit)
	if _, err := allocCommit(p, 4, []int64{1, 2}, ""); err != nil {
		t.Fatal(err)
	}
	if p.RefCount(hit) != 2 || p.NumFree() != 1 {
		t.Fatalf("a pinned free block hit by a sequence: ref %d, NumFree %d; want 2 and 1", p.RefCount(hit), p.NumFree())
	}
	check(t, p)
	p.Unpin(hit)
	p.Deallocate(4)
	if p.NumFree() != 2 {
		t.Fatalf("NumFree %d after both let go, want 2", p.NumFree())
	}
	check(t, p)
}
