package pinned

import (
	"runtime"
	"slices"
	"testing"
	"weak"

	"github.com/kvtier/kvtier/messages"
)

// TestTierPassesChainsDown: what the GPU said of a block (namespace id,
// token count, parent, token ids, adapter) goes down with it when pinned
// memory drains it, for the tier below to record.
func TestTierPassesChainsDown(t *testing.T) {
	tr := newTestTier(t, 2, true)
	req := offer(1, 2)
	req.Items[0].Namespace = 77
	req.Items[0].Chain = messages.BlockChain{Tokens: []int64{1, 2, 3, 4}, LoRA: "adapter"}
	req.Items[1].Namespace = 77
	req.Items[1].Chain = messages.BlockChain{Parent: 1, HasParent: true, Tokens: []int64{5, 6, 7, 8}, LoRA: "adapter"}
	tr.Offload(req, gpuPeer{})
	g := step(t, tr).Sends[0].Msg.(*messages.OffloadGrant)
	tr.OffloadDone(&messages.OffloadDone{Slots: g.Slots, Hashes: []uint64{1, 2}})
	step(t, tr)

	tr.Offload(offer(3, 4), gpuPeer{}) // full: both drain
	r := step(t, tr)
	if len(r.ToLower) != 1 {
		t.Fatalf("ready %+v, want one write below", r)
	}
	w := r.ToLower[0].(*messages.LowerWrite)
	if len(w.Items) != 2 {
		t.Fatalf("drained %+v", w.Items)
	}
	for _, it := range w.Items {
		want := req.Items[it.Hash-1]
		if it.Namespace != 77 || it.Tokens != 4 || it.Parent != want.Chain.Parent || it.HasParent != want.Chain.HasParent ||
			it.LoRA != "adapter" || !slices.Equal(it.TokenIDs, want.Chain.Tokens) {
			t.Fatalf("block %d drained as %+v, offered %+v", it.Hash, it, want)
		}
	}
}

// TestTierChainBelongsToItsBlock: a slot holding another block than the
// one the GPU described (read up from below, under another digest) passes
// no chain down.
func TestTierChainBelongsToItsBlock(t *testing.T) {
	tr := newTestTier(t, 1, true)
	req := offer(1)
	req.Items[0].Chain = messages.BlockChain{Tokens: []int64{1, 2, 3, 4}}
	tr.Offload(req, gpuPeer{})
	g := step(t, tr).Sends[0].Msg.(*messages.OffloadGrant)
	slot := g.Slots[0]
	tr.digests[slot] = digest(9) // as a read from below of block 9 leaves it
	if it := tr.lowerWriteItem(9, slot); it.TokenIDs != nil || it.Tokens != 0 {
		t.Fatalf("another block's chain passed down: %+v", it)
	}
	tr.digests[slot] = digest(1)
	if it := tr.lowerWriteItem(1, slot); !slices.Equal(it.TokenIDs, []int64{1, 2, 3, 4}) {
		t.Fatalf("the block's own chain was lost: %+v", it)
	}
}

// TestTierChainHoldsNoSlab: pinned memory keeps a copy of a block's token
// ids, not the array the GPU's offer shared with other blocks' (an
// offload's slab, an eviction's slab of 64 blocks). It kept the offer's
// slice in the slot's chain, and kept it after the block left: a slot
// refilled from below (which passes no chain) held the slab of a block
// long gone for as long as no offer was granted it again, and a pool held
// up to one whole slab per slot.
func TestTierChainHoldsNoSlab(t *testing.T) {
	tr := newTestTier(t, 1, true)
	slab := make([]int64, 1<<20) // an offload's: one block's ids at its front
	for i := range slab {
		slab[i] = int64(i)
	}
	gone := weak.Make(&slab[0])
	req := offer(1)
	req.Items[0].Chain = messages.BlockChain{Tokens: slab[:4:4]}
	slab = nil
	tr.Offload(req, gpuPeer{})
	g := step(t, tr).Sends[0].Msg.(*messages.OffloadGrant)
	tr.OffloadDone(&messages.OffloadDone{Slots: g.Slots, Hashes: []uint64{1}})
	step(t, tr)
	req = nil

	// A load of block 9 from below: block 1 drains (with its chain) and
	// leaves, and block 9 fills its slot.
	tr.Fetch(fetch(9), gpuPeer{})
	w := step(t, tr).ToLower[0].(*messages.LowerWrite)
	if len(w.Items) != 1 || w.Items[0].Hash != 1 || !slices.Equal(w.Items[0].TokenIDs, []int64{0, 1, 2, 3}) {
		t.Fatalf("drained %+v, want block 1 with its token ids", w.Items)
	}
	tr.LowerWritten(&messages.LowerWriteDone{Slots: []int{w.Items[0].Slot}, Written: []uint64{1}})
	rd := step(t, tr).ToLower[0].(*messages.LowerRead)
	w = nil
	tr.LowerRead(&messages.LowerReadDone{ID: rd.ID, OK: []bool{true}})
	fg := fetchGrantOf(t, step(t, tr))
	tr.Release(fg.Slots)
	step(t, tr)

	runtime.GC()
	runtime.GC()
	if gone.Value() != nil {
		t.Fatal("pinned memory holds the offer's whole token slab (8 MiB) of a block it no longer holds")
	}
	runtime.KeepAlive(tr)
}
