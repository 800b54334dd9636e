package blockpool

import (
	"slices"
	"testing"

	"github.com/kvtier/kvtier/prefixhash"
)

// TestEvictedChain: with Digests, an eviction says where the block sat in
// its chain (parent hash, namespace key, a copy of its tokens), for the
// tier below to record with its copy; a block whose parent went first has
// no chain (Tokens nil). BlockChain says the same of a resident block.
func TestEvictedChain(t *testing.T) {
	p, err := New(Config{NumBlocks: 4, BlockSize: 2, Digests: true})
	if err != nil {
		t.Fatal(err)
	}
	ns := prefixhash.Namespace{LoRA: "adapter"}.Key()
	a, err := allocCommit(p, 1, []int64{1, 2, 3, 4}, ns)
	if err != nil {
		t.Fatal(err)
	}
	head, _ := p.BlockHash(a.Blocks[0])
	if par, has, gotNS, ok := p.BlockChain(a.Blocks[1]); !ok || !has || par != head || gotNS != ns {
		t.Fatalf("BlockChain of the tail: %x %v %q %v", par, has, gotNS, ok)
	}
	if _, has, gotNS, ok := p.BlockChain(a.Blocks[0]); !ok || has || gotNS != ns {
		t.Fatalf("BlockChain of the head: %v %q %v", has, gotNS, ok)
	}
	if _, err := allocCommit(p, 2, []int64{5, 6, 7, 8}, ""); err != nil {
		t.Fatal(err)
	}
	if err := p.Deallocate(1); err != nil {
		t.Fatal(err)
	}
	if err := p.Deallocate(2); err != nil {
		t.Fatal(err)
	}
	if _, err := allocCommit(p, 3, []int64{9, 10, 11, 12}, ""); err != nil {
		t.Fatal(err)
	}
	ev := p.DrainEvicted(nil)
	if len(ev) != 2 || ev[0].Block != a.Blocks[1] || ev[1].Block != a.Blocks[0] {
		t.Fatalf("evicted %+v, want seq 1's tail then head", ev)
	}
	if e := ev[0]; !e.HasParent || e.Parent != head || e.NS != ns || !slices.Equal(e.Tokens, []int64{3, 4}) {
		t.Fatalf("tail's chain %+v", e)
	}
	if e := ev[1]; e.HasParent || e.NS != ns || !slices.Equal(e.Tokens, []int64{1, 2}) {
		t.Fatalf("head's chain %+v", e)
	}
	// The blocks now hold seq 3's tokens; the copies handed out stay.
	if _, err := allocCommit(p, 4, []int64{13, 14, 15, 16}, ""); err != nil {
		t.Fatal(err)
	}
	if ev2 := p.DrainEvicted(nil); len(ev2) != 2 || !slices.Equal(ev[0].Tokens, []int64{3, 4}) || !slices.Equal(ev[1].Tokens, []int64{1, 2}) {
		t.Fatalf("handed-out tokens changed: %+v %+v", ev, ev2)
	}
	check(t, p)
}

// TestEvictedChainParentGone: a block whose parent was reused before it
// is evicted with no chain: its parent's hash is not known any more.
func TestEvictedChainParentGone(t *testing.T) {
	p, err := New(Config{NumBlocks: 3, BlockSize: 1, Digests: true})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := allocCommit(p, 1, []int64{1, 2}, "")
	p.Deallocate(1)
	// The tail is evicted first in LRU order; pinned in place, the head
	// goes before it.
	p.Pin(a.Blocks[1])
	if _, err := allocCommit(p, 2, []int64{7, 8}, ""); err != nil {
		t.Fatal(err)
	}
	ev := p.DrainEvicted(nil)
	if len(ev) != 1 || ev[0].Block != a.Blocks[0] {
		t.Fatalf("evicted %+v, want seq 1's head", ev)
	}
	p.Unpin(a.Blocks[1])
	if _, _, _, ok := p.BlockChain(a.Blocks[1]); ok {
		t.Fatal("BlockChain of a block whose parent was reused")
	}
	if err := p.Deallocate(2); err != nil {
		t.Fatal(err)
	}
	if _, err := allocCommit(p, 3, []int64{20, 21, 22}, ""); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range p.DrainEvicted(nil) {
		if e.Block == a.Blocks[1] {
			found = true
			if e.Tokens != nil || e.HasParent {
				t.Fatalf("orphan evicted with a chain: %+v", e)
			}
		}
	}
	if !found {
		t.Fatal("the orphan was not evicted")
	}
	check(t, p)
}
