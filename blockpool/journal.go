package blockpool

import "github.com/kvtier/kvtier/prefixhash"

// Change is one entry of the pool's journal (Config.Journal): a block
// became findable by Hash (Stored) or stopped being findable.
//
// A hash several blocks hold (a forged 64-bit collision; a block of the
// same prefix left unreachable when its own was uncached) has one Stored
// entry, for the block that made it findable first, and one removal, when
// its last holder goes: with a forger's block first, the event stream
// carries the forger's tokens, parent and namespace for the hash. Naming
// each later holder instead (or too) would not mend it: the stream is
// keyed by the 64-bit hash, as vLLM's is, so a consumer keyed by it keeps
// one entry per hash whichever block is named, the publisher one record
// per hash, and a forger can commit after its victim as well as before.
// The mend is a key that cannot be forged on the wire (the 32-byte prefix
// digest as a bytes hash, which vLLM's ExternalBlockHash allows).
type Change struct {
	Stored bool
	Hash   prefixhash.Hash
	// Parent is the hash of the block before it in its chain, when
	// HasParent (not a chain's first block); Stored entries only.
	Parent    prefixhash.Hash
	HasParent bool
	// Tokens are the block's token ids (Stored entries only), in memory the
	// caller of DrainJournal owns.
	Tokens []int64
	// NS is the namespace key of the block's chain (Stored entries only;
	// "" when unknown: a block made findable again after its chain's start
	// was reused).
	NS string
}

// journal is the pool's record of changes since the last DrainJournal; its
// token ids live in one slab handed over with the entries.
type journal struct {
	changes []Change
	tokens  []int64
}

func (p *Pool) journalStored(b *block, ns string) {
	if !p.cfg.Journal {
		return
	}
	c := Change{Stored: true, Hash: b.hash, NS: ns}
	if b.parent != none && p.blocks[b.parent].gen == b.pgen {
		c.Parent, c.HasParent = p.blocks[b.parent].hash, true
	}
	j := &p.journal
	if cap(j.tokens)-len(j.tokens) < len(b.tokens) {
		// A new slab: the entries already drained or pending keep the old one.
		j.tokens = make([]int64, 0, max(64*p.cfg.BlockSize, 2*cap(j.tokens)))
	}
	start := len(j.tokens)
	j.tokens = append(j.tokens, b.tokens...)
	c.Tokens = j.tokens[start:len(j.tokens):len(j.tokens)]
	j.changes = append(j.changes, c)
}

// journalGone records that hash h stopped being findable, once no other
// block holds it (call it after removing the block's entry).
func (p *Pool) journalGone(h prefixhash.Hash) {
	if !p.cfg.Journal {
		return
	}
	if _, still := p.byHash.get(h); !still {
		p.journal.changes = append(p.journal.changes, Change{Hash: h})
	}
}

// DrainJournal returns the changes since the last call, in the order they
// happened, and forgets them; the caller owns the result (its Tokens too).
// Nil without Config.Journal.
func (p *Pool) DrainJournal() []Change {
	j := &p.journal
	if len(j.changes) == 0 {
		return nil
	}
	out := j.changes
	j.changes = nil
	// The tokens slab stays: Tokens handed out cover only its used part, and
	// the pool only appends past it, so the caller's slices never change.
	j.tokens = j.tokens[len(j.tokens):]
	return out
}

// JournalPending reports whether DrainJournal has changes to return.
func (p *Pool) JournalPending() bool { return len(p.journal.changes) > 0 }

// CachedHashes appends each hash a block is findable by, once (several blocks
// may hold one: Holders), in block order.
func (p *Pool) CachedHashes(dst []prefixhash.Hash) []prefixhash.Hash {
	for i := range p.blocks {
		if b := &p.blocks[i]; b.cached {
			if first, _ := p.byHash.get(b.hash); first == BlockID(i) {
				dst = append(dst, b.hash)
			}
		}
	}
	return dst
}

// CachedChanges appends a Stored change for each hash a block is findable
// by (its first holder, as CachedHashes), as the journal would record it
// now, with its chain's namespace when the chain's start is still linked.
// A parent comes before its children, as the journal says a chain (a
// consumer's radix index places a block under a parent it has seen). The
// tokens are copies the caller owns. For a tier whose reports of its
// changes may have been lost on the way: it reports its whole residency.
func (p *Pool) CachedChanges(dst []Change) []Change {
	var slab []int64
	listed := func(id int32) bool {
		b := &p.blocks[id]
		first, _ := p.byHash.get(b.hash)
		return b.cached && first == BlockID(id)
	}
	done := make([]bool, len(p.blocks))
	var up []int32
	for i := range p.blocks {
		// The block and its linked ancestors not listed yet, child first.
		up = up[:0]
		for id := int32(i); id != none && !done[id] && listed(id); {
			done[id] = true
			up = append(up, id)
			b := &p.blocks[id]
			if b.parent == none || p.blocks[b.parent].gen != b.pgen {
				break
			}
			id = b.parent
		}
		for k := len(up) - 1; k >= 0; k-- {
			id := up[k]
			b := &p.blocks[id]
			c := Change{Stored: true, Hash: b.hash, NS: p.chainNS(BlockID(id))}
			if b.parent != none && p.blocks[b.parent].gen == b.pgen {
				c.Parent, c.HasParent = p.blocks[b.parent].hash, true
			}
			start := len(slab)
			slab = append(slab, b.tokens...)
			c.Tokens = slab[start:len(slab):len(slab)]
			dst = append(dst, c)
		}
	}
	return dst
}
