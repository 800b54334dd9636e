package blockpool

import "fmt"

// Pin adds a reference to block id held by the pool's owner rather than by a
// sequence — an in-flight copy reading or writing the block. A pinned block is
// never reused. A free block keeps its contents and its place in the free
// queue, so that a copy (an offload ahead of need reads the blocks next to be
// evicted) does not change when it is evicted, but it is not taken while
// pinned and does not count in NumFree; a sequence that hits it takes it out
// of the queue. Every Pin must be matched by one Unpin.
func (p *Pool) Pin(id BlockID) {
	b := p.at(id, "pin")
	if b.state == stateReserved {
		panic(fmt.Sprintf("kvtier: blockpool: pin of reserved block %d", id))
	}
	if b.state == stateFree {
		b.state, b.queuedPin = stateUsed, true
		p.queuedPins++
		if b.cached {
			p.freeCache--
		}
	}
	b.ref++
	if p.pins == nil {
		p.pins = make(map[BlockID]int32)
	}
	p.pins[id]++
}

// Unpin drops a reference taken by Pin; at zero references the block becomes free.
func (p *Pool) Unpin(id BlockID) {
	p.at(id, "unpin")
	n := p.pins[id]
	if n <= 0 {
		panic(fmt.Sprintf("kvtier: blockpool: unpin of block %d that is not pinned", id))
	}
	if n == 1 {
		delete(p.pins, id)
	} else {
		p.pins[id] = n - 1
	}
	p.unhold(id)
}

// Pinned returns how many pins block id holds.
func (p *Pool) Pinned(id BlockID) int {
	p.at(id, "pinned count")
	return int(p.pins[id])
}

// Detach replaces the block at table position idx of seq with a fresh block and
// drops seq's reference to the old one, which must be pinned (an in-flight copy
// still owns it). It returns the fresh block. Used when a load from a lower tier
// misses its deadline: the caller recomputes into the fresh block while the late
// copy finishes into the old one. Fails with *NoSpaceError when no block is free.
func (p *Pool) Detach(seq SeqID, idx int) (BlockID, error) {
	s, ok := p.seqs[seq]
	if !ok {
		return 0, fmt.Errorf("%w: %d", ErrUnknownSequence, seq)
	}
	if idx < 0 || idx >= len(s.table) {
		return 0, fmt.Errorf("%w: table index %d of %d", ErrBadArgument, idx, len(s.table))
	}
	old := s.table[idx]
	if p.pins[old] == 0 {
		panic(fmt.Sprintf("kvtier: blockpool: detach of block %d that no copy pins", old))
	}
	if p.numFree()+len(p.resv[seq]) == 0 {
		return 0, &NoSpaceError{Needed: 1, Free: 0}
	}
	fresh := p.take(seq)
	b, o := &p.blocks[fresh], &p.blocks[old]
	if len(o.tokens) == p.cfg.BlockSize {
		// Keep the keys and tokens so the fresh block is published once
		// recomputed and committed.
		b.hash = o.hash
		if p.cfg.Digests {
			p.digests[fresh] = p.digests[old]
		}
		p.unlink(b)
		b.parent, b.pgen, b.ns = o.parent, o.pgen, o.ns
		if o.ns != 0 {
			p.ns.acquire(p.ns.keys[o.ns])
		}
		p.setTokens(fresh, o.tokens)
	}
	s.table[idx] = fresh
	p.unhold(old)
	return fresh, nil
}

// Recache makes a block findable by its hash (again) because its contents became
// valid outside a sequence's commit: a load from a lower tier, verified against
// the block's digest, finished. It does nothing if the block holds no full block,
// is findable already, or a findable block holds what it holds (see publish).
func (p *Pool) Recache(id BlockID) {
	if b := p.at(id, "recache"); b.cached || len(b.tokens) != p.cfg.BlockSize {
		return
	}
	ns := ""
	if p.cfg.Journal {
		ns = p.chainNS(id)
	}
	p.publish(id, ns)
}
