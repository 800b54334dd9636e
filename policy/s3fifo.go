package policy

import (
	"fmt"
	"math"
)

// Queues a S3-FIFO node can be on.
const (
	onSmall uint8 = iota + 1
	onMain
	onGhost
)

// maxFreq caps the S3-FIFO access counter (two bits in the paper).
const maxFreq = 3

// S3FIFOConfig holds S3-FIFO's three numbers. DefaultS3FIFOConfig is the
// published algorithm's; NewS3FIFO takes any other.
type S3FIFOConfig struct {
	// SmallRatio is the small queue's share of capacity, in (0, 1).
	SmallRatio float64
	// GhostRatio sizes the ghost queue, in keys per unit of capacity (> 0).
	GhostRatio float64
	// MoveToMain is how many hits a key needs while on small to move to main
	// when small evicts it (1..3).
	MoveToMain uint8
}

// DefaultS3FIFOConfig returns the parameters of S3-FIFO as published (Yang et
// al., "FIFO queues are all you need for cache eviction", SOSP'23) and as its
// authors' libCacheSim runs it by default: a small queue of 10% of capacity
// (the paper chose 10% on ten traces and found it generalises), a ghost queue
// of as many keys as main holds (90% of capacity; libCacheSim's
// ghost-size-ratio=0.90), and promotion to main of a key hit at least once
// while on small (move-to-main-threshold=1). AIBrix's L1 cache runs S3-FIFO
// with a 30% small queue by default; kvtier's earlier S3-FIFO kept a ghost of
// 1.0x capacity. Both are one S3FIFOConfig away.
func DefaultS3FIFOConfig() S3FIFOConfig {
	return S3FIFOConfig{SmallRatio: 0.10, GhostRatio: 0.90, MoveToMain: 1}
}

func (c S3FIFOConfig) validate() error {
	if !(c.SmallRatio > 0 && c.SmallRatio < 1) || !(c.GhostRatio > 0) || c.MoveToMain < 1 || c.MoveToMain > maxFreq {
		return fmt.Errorf("kvtier: policy: S3-FIFO config %+v: %w", c, ErrBadConfig)
	}
	return nil
}

// NewS3FIFO returns an empty S3-FIFO policy of capacity keys with cfg.
func NewS3FIFO(capacity int, cfg S3FIFOConfig) (Policy, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("kvtier: policy: new S3-FIFO with capacity %d: %w", capacity, ErrBadCapacity)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// The arena indexes resident and ghost nodes with int32s; this also
	// keeps int(GhostRatio × capacity) from converting an out-of-range
	// float (MinInt64 on amd64, MaxInt64 on arm64).
	if !(float64(capacity)*(1+cfg.GhostRatio) < math.MaxInt32) {
		return nil, fmt.Errorf("kvtier: policy: S3-FIFO of capacity %d with GhostRatio %g: more nodes than an arena indexes: %w", capacity, cfg.GhostRatio, ErrBadConfig)
	}
	return newS3FIFO(capacity, cfg), nil
}

// s3fifo is the S3-FIFO policy (Yang et al., SOSP'23), the default L1 policy
// of AIBrix, with the numbers of an S3FIFOConfig:
//
//   - New keys enter the small queue, SmallRatio of capacity, so that keys hit
//     only once (one-hit wonders) leave quickly.
//   - Evicting from small moves a key hit at least MoveToMain times since it
//     entered to main with its counter reset; the first other key is evicted
//     and remembered in the ghost queue.
//   - A key added while remembered in ghost goes straight to main.
//   - Evicting from main gives keys with freq > 0 another round (moved to the
//     back with freq decremented) and evicts the first key with freq 0.
//   - The ghost queue keeps up to GhostRatio x capacity keys and holds no
//     resident data.
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
	promote  uint8 // MoveToMain
}

func newS3FIFO(capacity int, cfg S3FIFOConfig) *s3fifo {
	ghost := max(1, int(cfg.GhostRatio*float64(capacity)))
	return &s3fifo{
		arena:    newArena(capacity + ghost), // resident plus ghost nodes
		small:    newQueue(),
		main:     newQueue(),
		ghost:    newQueue(),
		index:    make(map[Key]int32, hint(capacity+ghost)),
		smallCap: max(1, int(cfg.SmallRatio*float64(capacity))),
		ghostCap: ghost,
		promote:  cfg.MoveToMain,
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
		case n.freq >= p.promote:
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
