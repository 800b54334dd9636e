package pinned

import (
	"slices"

	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/prefixhash"
)

// slotChain is what the GPU said of the block a slot was granted for
// besides its bytes (messages.OffloadItem's Namespace, Tokens and Chain), kept to
// pass down with the block (LowerWriteItem) for the tiers below to record.
// It belongs to the block of that digest: a slot refilled with another
// block (from below, which says nothing of chains) no longer matches it,
// and one refilled with the same block (same digest: same namespace and
// tokens) still does.
type slotChain struct {
	digest    prefixhash.Digest
	set       bool
	namespace uint64
	tokens    int
	chain     messages.BlockChain
}

// keepChain records what offer it says of the block granted slot. The token
// ids are copied: the offer's share an array with other blocks' (the GPU's
// slab for an offload, or for 64 evictions), which a slot would keep whole
// for as long as it kept the chain, and a slot keeps it after its block
// left until it is granted again (a read from below fills it with none).
func (t *Tier) keepChain(slot int, it *messages.OffloadItem) {
	if t.chains == nil {
		t.chains = make([]slotChain, t.pool.NumSlots())
	}
	c := it.Chain
	c.Tokens = slices.Clip(slices.Clone(c.Tokens))
	t.chains[slot] = slotChain{digest: it.Digest, set: true, namespace: it.Namespace, tokens: it.Tokens, chain: c}
}

// lowerWriteItem is slot's block, of hash h, as written down: with the
// chain the GPU gave it when the slot still holds that block.
func (t *Tier) lowerWriteItem(h uint64, slot int) messages.LowerWriteItem {
	it := messages.LowerWriteItem{Hash: h, Slot: slot, Bytes: t.pool.Bytes(slot), Digest: t.digests[slot]}
	if slot < len(t.chains) {
		if c := &t.chains[slot]; c.set && c.digest == it.Digest {
			it.Namespace, it.Tokens, it.Class = c.namespace, c.tokens, c.chain.Class
			if c.chain.Tokens != nil {
				it.Parent, it.HasParent, it.TokenIDs, it.LoRA = c.chain.Parent, c.chain.HasParent, c.chain.Tokens, c.chain.LoRA
			}
		}
	}
	return it
}

// slotClass is the class (messages.BlockChain.Class) the GPU gave the block
// it was granted slot for, 0 when it gave none.
func (t *Tier) slotClass(slot int) uint8 {
	if slot < len(t.chains) && t.chains[slot].set {
		return t.chains[slot].chain.Class
	}
	return 0
}
