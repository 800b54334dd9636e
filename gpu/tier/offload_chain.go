package tier

import (
	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/prefixhash"
)

// chainer fills the chain metadata of one offload's items (what the tiers
// below record with the copy, for the KV events a disk reopened after a
// restart announces). It remembers the last namespace it named, as an
// offload's blocks mostly share one, so the id and adapter are derived once.
type chainer struct {
	ns     string
	set    bool
	id     uint64
	lora   string
	tokens []int64 // the op's slab: one copy of every block's token ids
	room   int     // the slab's size, made on the first copy
}

// newChainer returns a chainer whose slab, made only when a block's token
// ids are copied, has room for blocks blocks of blockSize.
func newChainer(blockSize, blocks int) *chainer {
	return &chainer{room: blockSize * blocks}
}

// fill sets the item's Namespace and Chain. owned are token ids it may
// keep (an eviction's copy); otherwise poolTokens (the pool's memory) are
// copied into the op's slab. No tokens leave the chain unknown.
func (c *chainer) fill(it *messages.OffloadItem, parent prefixhash.Hash, hasParent bool, ns string, owned, poolTokens []int64) {
	if !c.set || ns != c.ns {
		c.ns, c.set, c.lora = ns, true, prefixhash.LoRAOf(ns)
		s, _ := prefixhash.Seed(ns)
		c.id = uint64(s)
	}
	it.Namespace = c.id
	toks := owned
	if toks == nil && poolTokens != nil {
		if c.tokens == nil {
			c.tokens = make([]int64, 0, max(c.room, len(poolTokens)))
		}
		start := len(c.tokens)
		c.tokens = append(c.tokens, poolTokens...)
		toks = c.tokens[start:len(c.tokens):len(c.tokens)]
	}
	if toks == nil {
		return
	}
	it.Chain = messages.BlockChain{Parent: uint64(parent), HasParent: hasParent, Tokens: toks, LoRA: c.lora}
}
