package policy

// Queues a S3-FIFO node can be on.
const (
	onSmall uint8 = iota + 1
	onMain
	onGhost
)

// maxFreq caps the S3-FIFO access counter (two bits in the paper).
const maxFreq = 3

// s3fifo is the S3-FIFO policy (Yang et al., SOSP'23), the default L1 policy
// of AIBrix:
//
//   - New keys enter the small queue, sized about 10% of capacity, so that
//     keys hit only once (one-hit wonders) leave quickly.
//   - Evicting from small moves a key that was hit since it entered (freq > 0)
//     to main with its counter reset; the first key with freq 0 is evicted and
//     remembered in the ghost queue.
//   - A key added while remembered in ghost goes straight to main.
//   - Evicting from main gives keys with freq > 0 another round (moved to the
//     back with freq decremented) and evicts the first key with freq 0.
//   - The ghost queue keeps up to capacity keys and holds no resident data.
//
// Evict takes from small when small holds at least its share or main is
// empty, and from main otherwise; if the chosen queue has nothing evictable
// it falls back to the other one.
type s3fifo struct {
	arena
	small, main, ghost queue
	// index maps resident and ghost keys to their node; node.queue says which.
	index    map[Key]int32
	smallCap int
	ghostCap int
}

func newS3FIFO(capacity int) *s3fifo {
	return &s3fifo{
		arena:    newArena(2 * capacity), // resident plus ghost nodes
		small:    newQueue(),
		main:     newQueue(),
		ghost:    newQueue(),
		index:    make(map[Key]int32, hint(2*capacity)),
		smallCap: max(1, capacity/10),
		ghostCap: capacity,
	}
}

func (p *s3fifo) Kind() Kind { return S3FIFO }

// Add inserts k into small, or into main if k is remembered in ghost. A
// resident k gets an access instead.
func (p *s3fifo) Add(k Key) {
	i, ok := p.index[k]
	if !ok {
		i = p.alloc(k)
		p.nodes[i].queue = onSmall
		p.small.pushBack(&p.arena, i)
		p.index[k] = i
		return
	}
	n := &p.nodes[i]
	if n.queue != onGhost {
		n.freq = min(n.freq+1, maxFreq)
		return
	}
	p.ghost.unlink(&p.arena, i)
	n.freq, n.queue = 0, onMain
	p.main.pushBack(&p.arena, i)
}

// Access counts a hit on a resident k, up to maxFreq. It never reorders.
func (p *s3fifo) Access(k Key) {
	if i, ok := p.index[k]; ok {
		if n := &p.nodes[i]; n.queue != onGhost {
			n.freq = min(n.freq+1, maxFreq)
		}
	}
}

// Remove forgets a resident k. A ghost entry for k is left alone: it is not
// resident, and it only records that k was evicted recently.
func (p *s3fifo) Remove(k Key) {
	i, ok := p.index[k]
	if !ok {
		return
	}
	switch p.nodes[i].queue {
	case onSmall:
		p.small.unlink(&p.arena, i)
	case onMain:
		p.main.unlink(&p.arena, i)
	default:
		return
	}
	delete(p.index, k)
	p.release(i)
}

func (p *s3fifo) Evict(evictable func(Key) bool) (Key, bool) {
	if p.small.n > 0 && (p.small.n >= p.smallCap || p.main.n == 0) {
		if k, ok := p.evictSmall(evictable); ok {
			return k, true
		}
		// Whatever small promoted is now on main and may be evictable there.
		return p.evictMain(evictable)
	}
	if k, ok := p.evictMain(evictable); ok {
		return k, true
	}
	promoted := p.main.n
	if k, ok := p.evictSmall(evictable); ok {
		return k, true
	}
	if p.main.n == promoted {
		return 0, false
	}
	return p.evictMain(evictable)
}

// evictSmall walks small from its oldest key: keys hit since they entered
// move to main, the first evictable key with freq 0 is evicted into ghost.
// Rejected keys stay where they are.
func (p *s3fifo) evictSmall(evictable func(Key) bool) (Key, bool) {
	for i := p.small.head; i != nilNode; {
		n := &p.nodes[i]
		next := n.next
		switch {
		case n.freq > 0:
			p.small.unlink(&p.arena, i)
			n.freq, n.queue = 0, onMain
			p.main.pushBack(&p.arena, i)
		case evictable == nil || evictable(n.key):
			k := n.key
			p.small.unlink(&p.arena, i)
			p.remember(i)
			return k, true
		}
		i = next
	}
	return 0, false
}

// evictMain walks main from its oldest key: keys with freq > 0 go to the back
// with freq decremented (and are met again later in the walk), the first
// evictable key with freq 0 is evicted. Rejected keys with freq 0 stay where
// they are. The walk ends because every revisit lowers a counter.
func (p *s3fifo) evictMain(evictable func(Key) bool) (Key, bool) {
	for i := p.main.head; i != nilNode; {
		n := &p.nodes[i]
		next := n.next
		switch {
		case n.freq > 0:
			n.freq--
			if next == nilNode {
				next = i // already at the back: look at it again
			} else {
				p.main.moveToBack(&p.arena, i)
			}
		case evictable == nil || evictable(n.key):
			k := n.key
			p.main.unlink(&p.arena, i)
			delete(p.index, k)
			p.release(i)
			return k, true
		}
		i = next
	}
	return 0, false
}

// remember puts the unlinked node i on the ghost queue, dropping the oldest
// ghost when the queue is over its size.
func (p *s3fifo) remember(i int32) {
	p.nodes[i].freq, p.nodes[i].queue = 0, onGhost
	p.ghost.pushBack(&p.arena, i)
	if p.ghost.n > p.ghostCap {
		g := p.ghost.head
		p.ghost.unlink(&p.arena, g)
		delete(p.index, p.nodes[g].key)
		p.release(g)
	}
}

func (p *s3fifo) Contains(k Key) bool {
	i, ok := p.index[k]
	return ok && p.nodes[i].queue != onGhost
}

func (p *s3fifo) Len() int { return p.small.n + p.main.n }
