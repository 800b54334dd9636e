package blockpool

import "testing"

// TestCachedChangesParentsFirst (review probe of b32e61c): a Full
// residency is built from CachedChanges and published in its order; a
// BlockStored whose parent the consumer has not seen yet is one a radix
// index (vLLM's, Dynamo's router) cannot place. The journal says a chain
// parent first, as blocks are committed; CachedChanges walks block ids,
// and blocks reused from the free queue (freed tail first) hold a chain
// in descending ids.
func TestCachedChangesParentsFirst(t *testing.T) {
	p, err := New(Config{NumBlocks: 4, BlockSize: 2, Journal: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, toks := range [][]int64{{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11, 12}} {
		seq := SeqID(i + 1)
		if _, err := p.Allocate(seq, toks, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Commit(seq, AllTokens, nil); err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			if err := p.Deallocate(seq); err != nil {
				t.Fatal(err)
			}
		}
	}
	seen := map[uint64]bool{}
	for _, c := range p.CachedChanges(nil) {
		if c.HasParent && !seen[uint64(c.Parent)] {
			t.Fatalf("CachedChanges %+v: block %x comes before its parent %x", p.CachedChanges(nil), uint64(c.Hash), uint64(c.Parent))
		}
		seen[uint64(c.Hash)] = true
	}
}
