package policy

// Lists an ARC node can be on.
const (
	onT1 uint8 = iota + 1 // resident, hit once since it (re)entered
	onT2                  // resident, hit at least twice
	onB1                  // ghost of a key evicted from T1
	onB2                  // ghost of a key evicted from T2
)

// arcGhostFactor sets how many keys each ghost list remembers, as a multiple
// of the capacity. Classic ARC remembers about one capacity's worth; KV-cache
// traces reuse blocks at distances well beyond the tier (most blocks are used
// once and flow through between two uses of a useful one), so remembering
// twice the tier lets a reuse at up to three capacities register as a ghost
// hit. A ghost costs one index entry and one node, no block.
const arcGhostFactor = 2

// arc is Adaptive Replacement Cache (Megiddo and Modha, FAST'03), with the
// eviction step driven by the tier:
//
//   - T1 holds resident keys seen once since they entered, T2 keys hit again.
//     Both are LRU lists; a hit on either moves the key to the back of T2.
//   - B1 and B2 remember keys recently evicted from T1 and T2 (no data).
//   - target is the size ARC aims to give T1. Adding a key remembered in B1
//     (recency was too short) raises it by max(1, |B2|/|B1|), adding one
//     remembered in B2 (frequency was too short) lowers it by
//     max(1, |B1|/|B2|); either way the key goes to the back of T2.
//   - A new key goes to the back of T1.
//   - Evict takes the LRU key of T1 when T1 holds more than target (or T2 is
//     empty), else the LRU key of T2, and remembers it in B1 or B2. If that
//     list has nothing evictable it falls back to the other one.
//
// Keys used once never reach T2, so a stream of one-use blocks (the tails of
// prompts) churns through T1 while T2 keeps the reused prefixes; the target
// moves the boundary to whichever side ghost hits show was short. Classic
// ARC also prefers T1 when the incoming key is a B2 ghost and |T1| = target;
// here eviction does not know the incoming key, so that tie goes to T2.
type arc struct {
	arena
	t1, t2, b1, b2 queue
	// index maps resident and ghost keys to their node; node.queue says which.
	index    map[Key]int32
	capacity int
	target   int // desired |T1|, 0..capacity
	ghostCap int // bound of each of B1 and B2
}

func newARC(capacity int) *arc {
	nodes := capacity * (1 + 2*arcGhostFactor)
	return &arc{
		arena:    newArena(nodes),
		t1:       newQueue(),
		t2:       newQueue(),
		b1:       newQueue(),
		b2:       newQueue(),
		index:    make(map[Key]int32, hint(nodes)),
		capacity: capacity,
		ghostCap: arcGhostFactor * capacity,
	}
}

func (p *arc) Kind() Kind { return ARC }

// Add inserts k at the back of T1, or at the back of T2 if k is remembered in
// a ghost list (adapting the target first). A resident k gets an access.
func (p *arc) Add(k Key) {
	i, ok := p.index[k]
	if !ok {
		i = p.alloc(k)
		p.nodes[i].queue = onT1
		p.t1.pushBack(&p.arena, i)
		p.index[k] = i
		return
	}
	switch p.nodes[i].queue {
	case onT1, onT2:
		p.Access(k)
		return
	case onB1:
		p.target = min(p.capacity, p.target+max(1, p.b2.n/p.b1.n))
		p.b1.unlink(&p.arena, i)
	default:
		p.target = max(0, p.target-max(1, p.b1.n/p.b2.n))
		p.b2.unlink(&p.arena, i)
	}
	p.nodes[i].queue = onT2
	p.t2.pushBack(&p.arena, i)
}

// Access moves a resident k to the back of T2. Ghost and unknown keys are
// ignored.
func (p *arc) Access(k Key) {
	i, ok := p.index[k]
	if !ok {
		return
	}
	switch n := &p.nodes[i]; n.queue {
	case onT1:
		p.t1.unlink(&p.arena, i)
		n.queue = onT2
		p.t2.pushBack(&p.arena, i)
	case onT2:
		p.t2.moveToBack(&p.arena, i)
	}
}

// Remove forgets a resident k without remembering it in a ghost list: it left
// the tier by the owner's choice, not by eviction. A ghost k is left alone.
func (p *arc) Remove(k Key) {
	i, ok := p.index[k]
	if !ok {
		return
	}
	switch p.nodes[i].queue {
	case onT1:
		p.t1.unlink(&p.arena, i)
	case onT2:
		p.t2.unlink(&p.arena, i)
	default:
		return
	}
	delete(p.index, k)
	p.release(i)
}

func (p *arc) Evict(evictable func(Key) bool) (Key, bool) {
	first, second := &p.t2, &p.t1
	if p.t1.n > 0 && (p.t1.n > p.target || p.t2.n == 0) {
		first, second = &p.t1, &p.t2
	}
	if k, ok := p.evictFrom(first, evictable); ok {
		return k, true
	}
	return p.evictFrom(second, evictable)
}

// evictFrom takes the oldest evictable key of q (T1 or T2) and remembers it in
// the matching ghost list. Rejected keys keep their place.
func (p *arc) evictFrom(q *queue, evictable func(Key) bool) (Key, bool) {
	for i := q.head; i != nilNode; i = p.nodes[i].next {
		k := p.nodes[i].key
		if evictable != nil && !evictable(k) {
			continue
		}
		q.unlink(&p.arena, i)
		if q == &p.t1 {
			p.remember(&p.b1, onB1, i)
		} else {
			p.remember(&p.b2, onB2, i)
		}
		return k, true
	}
	return 0, false
}

// remember puts the unlinked node i at the back of ghost list g, dropping the
// oldest ghost of g when g is over its bound.
func (p *arc) remember(g *queue, tag uint8, i int32) {
	p.nodes[i].queue = tag
	g.pushBack(&p.arena, i)
	if g.n > p.ghostCap {
		h := g.head
		g.unlink(&p.arena, h)
		delete(p.index, p.nodes[h].key)
		p.release(h)
	}
}

func (p *arc) Contains(k Key) bool {
	i, ok := p.index[k]
	return ok && p.nodes[i].queue <= onT2
}

func (p *arc) Len() int { return p.t1.n + p.t2.n }
