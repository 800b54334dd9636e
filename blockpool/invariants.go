package blockpool

import "fmt"

// CheckInvariants walks the whole pool and reports the first inconsistency: free
// queue links and count, each block in exactly one state, reference counts equal to
// the number of sequences holding each block, the hash table (every slot) and cached flags in
// agreement, and token ids stored in each block's place in the slab. It is
// O(blocks + held blocks + table slots); tests and the invariants build call it.
func (p *Pool) CheckInvariants() error {
	seen := make([]bool, len(p.blocks))
	n, prev, queued := 0, int32(none), 0
	for id := p.free.head; id != none; id = p.blocks[id].next {
		if seen[id] {
			return fmt.Errorf("free queue: cycle at block %d", id)
		}
		seen[id] = true
		b := &p.blocks[id]
		if b.prev != prev {
			return fmt.Errorf("free queue: block %d prev %d, want %d", id, b.prev, prev)
		}
		if b.queuedPin {
			queued++
			if b.state != stateUsed || b.ref == 0 || b.ref != p.pins[BlockID(id)] {
				return fmt.Errorf("free queue: block %d pinned in place has state %d ref %d pins %d", id, b.state, b.ref, p.pins[BlockID(id)])
			}
		} else if b.state != stateFree || b.ref != 0 {
			return fmt.Errorf("free queue: block %d has state %d ref %d", id, b.state, b.ref)
		}
		prev = id
		n++
	}
	if n != p.free.n || prev != p.free.tail {
		return fmt.Errorf("free queue: %d linked, count %d, tail %d want %d", n, p.free.n, p.free.tail, prev)
	}
	if queued != p.queuedPins {
		return fmt.Errorf("free queue: %d blocks pinned in place, count %d", queued, p.queuedPins)
	}
	for i := range p.blocks {
		if p.blocks[i].queuedPin && !seen[i] {
			return fmt.Errorf("block %d: pinned in place but not in the free queue", i)
		}
	}
	nsRefs := make(map[uint32]int32)
	for i := range p.blocks {
		if b := &p.blocks[i]; b.ns != 0 {
			if b.parent != none && p.blocks[b.parent].gen == b.pgen && p.blocks[b.parent].ns != b.ns {
				return fmt.Errorf("block %d: namespace %d, its parent %d's %d", i, b.ns, b.parent, p.blocks[b.parent].ns)
			}
			nsRefs[b.ns]++
		}
	}
	if len(nsRefs) != p.ns.len() {
		return fmt.Errorf("namespaces: %d held by blocks, %d interned", len(nsRefs), p.ns.len())
	}
	for id, n := range nsRefs {
		if int(id) >= len(p.ns.refs) || p.ns.refs[id] != n || p.ns.ids[p.ns.keys[id]] != id {
			return fmt.Errorf("namespace %d: %d blocks hold it, table says %v", id, n, p.ns.refs)
		}
	}
	holders := make([]int32, len(p.blocks))
	for sid, s := range p.seqs {
		if want := p.numBlocksFor(s.numTokens); len(s.table) < want {
			return fmt.Errorf("sequence %d: %d blocks for %d tokens, want at least %d", sid, len(s.table), s.numTokens, want)
		}
		for _, id := range s.table {
			holders[id]++
		}
	}
	for id, n := range p.pins {
		if n <= 0 {
			return fmt.Errorf("block %d: pin count %d", id, n)
		}
		holders[id] += n
	}
	reserved := 0
	for rid, ids := range p.resv {
		for _, id := range ids {
			if p.blocks[id].state != stateReserved || seen[id] {
				return fmt.Errorf("reservation %d: block %d state %d", rid, id, p.blocks[id].state)
			}
			seen[id] = true
			reserved++
		}
	}
	if reserved != p.reserved {
		return fmt.Errorf("reserved count %d, walked %d", p.reserved, reserved)
	}
	// The table's slots first: the walk below looks blocks up through it.
	if err := p.checkHashTable(); err != nil {
		return err
	}
	// Commit state, after the table's check: it looks hashes up.
	for sid, s := range p.seqs {
		if s.committed < 0 || s.committed > s.numTokens {
			return fmt.Errorf("sequence %d: %d tokens committed of %d", sid, s.committed, s.numTokens)
		}
		for i := range s.committed / p.cfg.BlockSize {
			// A committed block holds its full block; it is findable unless it
			// was a duplicate when committed.
			id := s.table[i]
			b := &p.blocks[id]
			if len(b.tokens) != p.cfg.BlockSize {
				return fmt.Errorf("sequence %d: committed block %d (table %d) holds no full block", sid, id, i)
			}
		}
		if len(s.tail) != s.numTokens%p.cfg.BlockSize {
			return fmt.Errorf("sequence %d: tail of %d tokens for %d tokens", sid, len(s.tail), s.numTokens)
		}
	}
	freeCached, cached := 0, 0
	for i := range p.blocks {
		b := &p.blocks[i]
		if b.ref != holders[i] {
			return fmt.Errorf("block %d: ref %d, held by %d sequences and pins", i, b.ref, holders[i])
		}
		switch {
		case b.state == stateUsed && b.ref == 0:
			return fmt.Errorf("block %d: used with ref 0", i)
		case b.state == stateFree && !seen[i]:
			return fmt.Errorf("block %d: free but not in the free queue", i)
		case b.state == stateReserved && b.ref != 0:
			return fmt.Errorf("block %d: reserved with ref %d", i, b.ref)
		}
		if cap(b.tokens) != 0 && !p.slab.holds(BlockID(i), b.tokens) {
			return fmt.Errorf("block %d: tokens are not its place in the slab", i)
		}
		if b.cached {
			cached++
			if !p.byHash.holds(b.hash, BlockID(i)) {
				return fmt.Errorf("block %d: cached but the hash table has no entry for it", i)
			}
			if x, dup := p.equivalent(BlockID(i)); dup {
				return fmt.Errorf("block %d: cached, as is its equivalent %d", i, x)
			}
			if len(b.tokens) != p.cfg.BlockSize {
				return fmt.Errorf("block %d: cached with %d tokens", i, len(b.tokens))
			}
			if b.state == stateFree {
				freeCached++
			}
		}
	}
	if freeCached != p.freeCache {
		return fmt.Errorf("free cached count %d, walked %d", p.freeCache, freeCached)
	}
	if cached != p.byHash.len() {
		return fmt.Errorf("hash table: %d entries, %d cached blocks", p.byHash.len(), cached)
	}
	return nil
}

// checkHashTable checks every slot of the hash table: the entry count, each entry
// naming a cached block whose hash has the entry's tag, and each entry lying on
// its probe run (no empty slot between its home and its slot), so lookups find it.
func (p *Pool) checkHashTable() error {
	t := &p.byHash
	if len(t.slots) == 0 || len(t.slots)&(len(t.slots)-1) != 0 || t.mask != uint64(len(t.slots)-1) {
		return fmt.Errorf("hash table: %d slots, mask %x", len(t.slots), t.mask)
	}
	n := 0
	for i, s := range t.slots {
		id, used := slotBlock(s)
		if !used {
			continue
		}
		n++
		if id < 0 || int(id) >= len(p.blocks) {
			return fmt.Errorf("hash table: slot %d names block %d of %d", i, id, len(p.blocks))
		}
		if b := &p.blocks[id]; !b.cached || p.byHash.tag(b.hash) != slotTag(s) {
			return fmt.Errorf("hash table: slot %d tag %x names block %d which holds %x cached=%v", i, slotTag(s), id, b.hash, b.cached)
		}
		home := t.home(slotTag(s))
		for j := home; j != uint64(i); j = (j + 1) & t.mask {
			if t.slots[j] == 0 {
				return fmt.Errorf("hash table: slot %d is cut off from its home %d by empty slot %d", i, home, j)
			}
		}
	}
	if n != t.n {
		return fmt.Errorf("hash table: %d slots in use, count %d", n, t.n)
	}
	return nil
}
