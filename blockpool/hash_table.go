package blockpool

import (
	"math/bits"
	"math/rand/v2"

	"github.com/kvtier/kvtier/prefixhash"
)

// hashTable maps the hash of each cached block to the block: an open-addressed
// table with linear probing and backward-shift deletion, so it holds no
// tombstones and a lookup stops at the first empty slot. A slot is 16 bytes, four
// to a cache line, and a lookup usually reads one line where a Go map at a
// million entries reads several.
//
// It never holds more than NumBlocks entries (one per cached block). It doubles
// while it is at most half full, so it ends at the first power of two of at least
// twice the cached blocks and never grows past 2*NumBlocks rounded up: at most 32
// bytes a block.
type hashTable struct {
	slots []hashSlot
	mask  uint64
	shift uint8  // 64 - log2(len(slots)): home takes the product's top bits
	seed  uint64 // per table, so crafted hashes cannot aim at one probe run
	n     int
}

// hashSlot is one entry; ref is the block id plus one, and zero marks an empty slot,
// so a freshly made table is all empty.
type hashSlot struct {
	hash prefixhash.Hash
	ref  uint32
}

const (
	minHashSlots = 16
	// hashMix is 2^64 divided by the golden ratio: multiplying spreads any bit of
	// the key into the product's top bits.
	hashMix = 0x9e3779b97f4a7c15
)

func (t *hashTable) init() {
	t.seed = rand.Uint64()
	t.alloc(minHashSlots)
}

func (t *hashTable) alloc(n int) {
	t.slots = make([]hashSlot, n)
	t.mask = uint64(n - 1)
	t.shift = uint8(64 - bits.TrailingZeros(uint(n)))
	t.n = 0
}

// home is the slot where the probe for h starts.
func (t *hashTable) home(h prefixhash.Hash) uint64 {
	return ((uint64(h) ^ t.seed) * hashMix) >> t.shift
}

// len returns the number of entries.
func (t *hashTable) len() int { return t.n }

// get returns the block holding hash h.
func (t *hashTable) get(h prefixhash.Hash) (BlockID, bool) {
	for i := t.home(h); ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.ref == 0 {
			return 0, false
		}
		if s.hash == h {
			return BlockID(s.ref - 1), true
		}
	}
}

// add maps h to id unless h is already in the table, and reports whether it did.
func (t *hashTable) add(h prefixhash.Hash, id BlockID) bool {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	for i := t.home(h); ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.ref == 0 {
			s.hash, s.ref = h, uint32(id)+1
			t.n++
			return true
		}
		if s.hash == h {
			return false
		}
	}
}

// remove deletes h, which must be in the table, and shifts back the entries after
// it whose probe run passed through its slot.
func (t *hashTable) remove(h prefixhash.Hash) {
	i := t.home(h)
	for ; t.slots[i].hash != h || t.slots[i].ref == 0; i = (i + 1) & t.mask {
		if t.slots[i].ref == 0 {
			panic("kvtier: blockpool: removing a hash the table does not hold")
		}
	}
	for j := (i + 1) & t.mask; t.slots[j].ref != 0; j = (j + 1) & t.mask {
		// The entry at j may move to the hole at i when i lies on its probe run,
		// that is when its home is at least as far back from j as i is.
		if (j-t.home(t.slots[j].hash))&t.mask >= (j-i)&t.mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = hashSlot{}
	t.n--
}

// grow doubles the table and reinserts every entry.
func (t *hashTable) grow() {
	old := t.slots
	t.alloc(2 * len(old))
	for _, s := range old {
		if s.ref != 0 {
			t.add(s.hash, BlockID(s.ref-1))
		}
	}
}
