package blockpool

import (
	"iter"
	"math/bits"
	"math/rand/v2"

	"github.com/kvtier/kvtier/prefixhash"
)

// hashTable maps the hash of each cached block to the block (two blocks may
// hold one hash: each has its entry, see next): an open-addressed
// table with linear probing and backward-shift deletion, so it holds no
// tombstones and a probe stops at the first empty slot.
//
// A slot is 8 bytes, eight to a cache line: a keyed 32-bit fingerprint of the
// hash (its tag) and the block id plus one (zero marks an empty slot, so a new
// table is all empty).
// A slot's home depends on its tag alone, so the table moves entries and grows
// without reading blocks. Two hashes can share a tag, so a lookup confirms a tag
// match against the block's full hash; removal names the block and matches the
// slot exactly.
//
// It holds one entry per cached block, at most NumBlocks. It doubles when it
// would be more than 3/8 full: short probe runs keep lookups, and the
// backward shift after a removal, to one cache line and few mispredicted
// branches. It never grows past 8/3*NumBlocks rounded up to a power of two: at
// most 43 bytes a block, 32 when NumBlocks is a power of two.
type hashTable struct {
	slots []uint64
	mask  uint64
	shift uint8 // 64 - log2(len(slots)): home takes the product's top bits
	// seed keys the tag (a fingerprint of the whole hash) and the home, per
	// table, so crafted hashes cannot aim at one probe run: hashes forged
	// to share any bits (internal/xxforge solves for a hash in constant
	// time) still get unrelated tags. Keeping the hash's low 32 bits as the
	// tag let every hash with the same low half share one run, whatever the
	// seed, and lookups of every tenant walk it.
	seed   uint64
	n      int
	blocks []block // the pool's blocks, to confirm tag matches
}

const (
	minHashSlots = 16
	// hashMix is 2^64 divided by the golden ratio: multiplying spreads any bit of
	// the tag into the product's top bits.
	hashMix = 0x9e3779b97f4a7c15
)

func (t *hashTable) init(blocks []block) {
	t.blocks = blocks
	t.seed = rand.Uint64()
	t.alloc(minHashSlots)
}

func (t *hashTable) alloc(n int) {
	t.slots = make([]uint64, n)
	t.mask = uint64(n - 1)
	t.shift = uint8(64 - bits.TrailingZeros(uint(n)))
	t.n = 0
}

// tag is the table's 32-bit fingerprint of h: the top half of a keyed
// multiply, so every bit of h (and of the seed) reaches it.
func (t *hashTable) tag(h prefixhash.Hash) uint32 {
	return uint32(((uint64(h) ^ t.seed) * hashMix) >> 32)
}

func packSlot(tag uint32, id BlockID) uint64 { return uint64(tag)<<32 | uint64(uint32(id)+1) }

// slotBlock returns the block a slot names and whether the slot is in use.
func slotBlock(s uint64) (BlockID, bool) { return BlockID(uint32(s) - 1), uint32(s) != 0 }

func slotTag(s uint64) uint32 { return uint32(s >> 32) }

// home is the slot where the probe for a tag starts.
func (t *hashTable) home(tag uint32) uint64 {
	return (uint64(tag^uint32(t.seed>>32)) * hashMix) >> t.shift
}

// len returns the number of entries.
func (t *hashTable) len() int { return t.n }

// get returns a block holding hash h (the first of its probe run).
func (t *hashTable) get(h prefixhash.Hash) (BlockID, bool) {
	id, _, ok := t.next(h, t.first(h))
	return id, ok
}

// first is where a walk of the blocks holding h starts (see next).
func (t *hashTable) first(h prefixhash.Hash) uint64 { return t.home(t.tag(h)) }

// next returns the first block holding h in the probe run from slot i on,
// and the slot to go on from for the next one: the table holds one entry per
// cached block, and two blocks may hold one hash (a collision, or a chain's
// block left unreachable when its prefix was uncached).
func (t *hashTable) next(h prefixhash.Hash, i uint64) (BlockID, uint64, bool) {
	tag := t.tag(h)
	for ; ; i = (i + 1) & t.mask {
		s := t.slots[i]
		id, used := slotBlock(s)
		if !used {
			return 0, i, false
		}
		if slotTag(s) == tag && t.blocks[id].hash == h {
			return id, (i + 1) & t.mask, true
		}
	}
}

// all yields every block holding hash h, in probe order.
func (t *hashTable) all(h prefixhash.Hash) iter.Seq[BlockID] {
	return func(yield func(BlockID) bool) {
		for i := t.first(h); ; {
			id, n, ok := t.next(h, i)
			if !ok || !yield(id) {
				return
			}
			i = n
		}
	}
}

// holds reports whether the table has block id's entry for hash h.
func (t *hashTable) holds(h prefixhash.Hash, id BlockID) bool {
	for x := range t.all(h) {
		if x == id {
			return true
		}
	}
	return false
}

// touch reads the home slot of each hash in hs and returns a value made of what it
// read, which the caller must keep so the reads are not optimised away. The reads
// do not depend on each other, so the processor overlaps their cache misses: the
// adds and removes that follow find their slots in cache instead of waiting for
// memory once per hash.
func (t *hashTable) touch(hs []prefixhash.Hash) uint64 {
	var x uint64
	for _, h := range hs {
		x ^= t.touchOne(h)
	}
	return x
}

// touchOne reads the home slot of h; see touch.
func (t *hashTable) touchOne(h prefixhash.Hash) uint64 { return t.slots[t.home(t.tag(h))] }

// add adds the entry of block id, which holds h (other blocks may hold h
// too).
func (t *hashTable) add(h prefixhash.Hash, id BlockID) {
	if 8*(t.n+1) > 3*len(t.slots) {
		t.grow()
	}
	tag := t.tag(h)
	i := t.home(tag)
	for t.slots[i] != 0 {
		i = (i + 1) & t.mask
	}
	t.slots[i] = packSlot(tag, id)
	t.n++
}

// remove deletes the entry of block id for hash h, which must be in the table, and
// shifts back the entries after it whose probe run passed through its slot.
func (t *hashTable) remove(h prefixhash.Hash, id BlockID) {
	tag := t.tag(h)
	want := packSlot(tag, id)
	i := t.home(tag)
	for ; t.slots[i] != want; i = (i + 1) & t.mask {
		if t.slots[i] == 0 {
			panic("kvtier: blockpool: removing a hash the table does not hold")
		}
	}
	for j := (i + 1) & t.mask; t.slots[j] != 0; j = (j + 1) & t.mask {
		// The entry at j may move to the hole at i when i lies on its probe run,
		// that is when its home is at least as far back from j as i is.
		if (j-t.home(slotTag(t.slots[j])))&t.mask >= (j-i)&t.mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = 0
	t.n--
}

// grow doubles the table and reinserts every entry.
func (t *hashTable) grow() {
	old := t.slots
	t.alloc(2 * len(old))
	for _, s := range old {
		if s == 0 {
			continue
		}
		i := t.home(slotTag(s))
		for t.slots[i] != 0 {
			i = (i + 1) & t.mask
		}
		t.slots[i] = s
		t.n++
	}
}
