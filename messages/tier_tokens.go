package messages

import (
	"fmt"
	"math/bits"
	"strings"
)

// NumTiers is how many tiers there are: GPU, Pinned, Disk and Remote. A new
// tier takes the next bit of Tier and raises it.
const NumTiers = 4

// Index is a single tier's place from the top, and the index of its count in
// a TierTokens: 0 for the GPU, then Pinned, Disk and Remote. t must be one
// tier: Index panics for an empty set or a set of several.
func (t Tier) Index() int {
	i := bits.TrailingZeros8(uint8(t)) // 8 for none
	if i >= NumTiers || t != 1<<i {
		panic("kvtier: Tier.Index of no tier or of several")
	}
	return i
}

// TierAt is the tier at index i of a TierTokens, 0 <= i < NumTiers: the
// inverse of Tier.Index.
func TierAt(i int) Tier { return 1 << i }

// TierTokens counts tokens per tier, indexed by Tier.Index: the GPU's
// first, then the tiers below it from the top. A fixed array, so results that
// carry one (AllocResult on the allocation path) cost no allocation, and a
// new tier adds an entry, not a field. Write a count with
// c[t.Index()] = n; read one with c.Of(t).
type TierTokens [NumTiers]int

// Of is tier t's count; t must be one tier.
func (c TierTokens) Of(t Tier) int { return c[t.Index()] }

// Below is the count of every tier under the GPU together.
func (c TierTokens) Below() int {
	n := 0
	for _, x := range c[1:] {
		n += x
	}
	return n
}

// Sum is the count of every tier together.
func (c TierTokens) Sum() int { return c[0] + c.Below() }

// String lists every tier's count, top first: "gpu=16 pinned=32 disk=0 remote=0".
func (c TierTokens) String() string {
	var b strings.Builder
	for i, n := range c {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%v=%d", TierAt(i), n)
	}
	return b.String()
}
