package pinned

import (
	"slices"
	"testing"

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
