package blockpool

import "testing"

// TestHitNeedsParentGeneration: a cached block is a hit only while the
// block it links to still holds what it held when it was linked (the
// parent's generation). Here the parent's block is reused for another
// prefix, and a prompt of that other prefix whose next hash collides (as an
// xxh64 forgery can make it, here through caller-supplied Keys) with the old
// child's hash, and whose next tokens equal the child's, finds the child
// linked to the same block id. Serving it would hand out the KV of the old
// prefix: it must be a miss. (Mutation test: follows without the pgen
// comparison served it and no other test failed.)
func TestHitNeedsParentGeneration(t *testing.T) {
	p := newPool(t, 4, 2)
	old := []int64{1, 2, 3, 4}
	a, err := allocCommit(p, 1, old, "")
	if err != nil {
		t.Fatal(err)
	}
	parent, child := a.Blocks[0], a.Blocks[1]
	childHash, cached := p.BlockHash(child)
	if !cached {
		t.Fatal("the child block is not cached after its commit")
	}
	if err := p.Deallocate(1); err != nil {
		t.Fatal(err)
	}
	// A Delete of the prefix's first block: it goes to the free queue's
	// head, uncached; its child stays cached (an orphan).
	p.Uncache(parent)
	other := []int64{9, 9}
	b, err := allocCommit(p, 2, other, "")
	if err != nil {
		t.Fatal(err)
	}
	if b.Blocks[0] != parent {
		t.Fatalf("the new prefix took block %d, want the uncached parent %d (test setup)", b.Blocks[0], parent)
	}
	if h, ok := p.BlockHash(child); !ok || h != childHash {
		t.Fatal("the old child was evicted (test setup)")
	}
	// The forged prompt: the other prefix, then the child's tokens, with the
	// child's hash at block 1.
	prompt := []int64{9, 9, 3, 4}
	k := ComputeKeys("", prompt, 2, false)
	k.Hashes[1] = childHash
	r, err := p.AllocateRequest(Request{Seq: 3, Tokens: prompt, Keys: k})
	if err != nil {
		t.Fatal(err)
	}
	if r.HitBlocks != 1 || r.Blocks[1] == child {
		t.Fatalf("hit blocks %d (table %v): the child of block %d's previous contents was served after the block was reused",
			r.HitBlocks, r.Blocks, parent)
	}
	check(t, p)
}
