package actors

import (
	"cmp"
	"slices"

	"github.com/kvtier/kvtier/disk"
	"github.com/kvtier/kvtier/messages"
)

// chainOf is the chain a write down records with the block (disk.Meta.Chain),
// nil when the item carries none (the GPU did not know it, or the block came
// up from a tier that keeps none).
func chainOf(it *messages.LowerWriteItem) *disk.Chain {
	if it.TokenIDs == nil {
		return nil
	}
	return &disk.Chain{HasParent: it.HasParent, TokenIDs: it.TokenIDs, LoRA: it.LoRA}
}

// reopened lists the records a reopened store holds for the index (and
// through it the event publisher): their hashes and, where every record
// said nothing, nil chains, else each one's chain (Tokens nil where its
// record has none). A parent on disk comes before its children, as the GPU
// announced them (a router's radix index places a block under a parent it
// has seen); otherwise the order is the hashes'.
func reopened(metas []disk.Meta) ([]uint64, []messages.BlockChain) {
	slices.SortFunc(metas, func(a, b disk.Meta) int { return cmp.Compare(a.Hash, b.Hash) })
	at := make(map[uint64]int, len(metas))
	known := false
	for i := range metas {
		at[metas[i].Hash] = i
		known = known || metas[i].Chain != nil
	}
	hashes := make([]uint64, 0, len(metas))
	if !known {
		for i := range metas {
			hashes = append(hashes, metas[i].Hash)
		}
		return hashes, nil
	}
	chains := make([]messages.BlockChain, 0, len(metas))
	done := make([]bool, len(metas))
	var up []int
	for i := range metas {
		// The record and its ancestors on disk not listed yet, child first.
		up = up[:0]
		for j := i; !done[j]; {
			done[j] = true
			up = append(up, j)
			c := metas[j].Chain
			if c == nil || !c.HasParent {
				break
			}
			p, ok := at[metas[j].Parent]
			if !ok {
				break
			}
			j = p
		}
		for k := len(up) - 1; k >= 0; k-- {
			m := &metas[up[k]]
			hashes = append(hashes, m.Hash)
			var bc messages.BlockChain
			if c := m.Chain; c != nil && c.TokenIDs != nil {
				bc = messages.BlockChain{Parent: m.Parent, HasParent: c.HasParent, Tokens: c.TokenIDs, LoRA: c.LoRA}
			}
			chains = append(chains, bc)
		}
	}
	return hashes, chains
}
