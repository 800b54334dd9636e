package tier

import (
	"fmt"

	"github.com/kvtier/kvtier/blockpool"
)

// CheckInvariants is the Tier's consistency walk: the pool's own invariants,
// plus every block the Tier believes a copy is moving is pinned, and every
// pinned block belongs to a copy in flight, every block with a publisher
// is on that sequence's claim list (and no other block is), and the
// sequences with a class are ones the pool holds. The invariants build runs it
// after every event. After Stop the books of copies in flight are dropped
// on purpose, and only the pool is checked.
func (t *Tier) CheckInvariants() error {
	if err := t.pool.CheckInvariants(); err != nil || t.stopped {
		return err
	}
	copies := map[blockpool.BlockID]int{}
	for _, op := range t.offload {
		for _, id := range op.blocks {
			copies[id]++
		}
	}
	for _, q := range t.serialQueue { // pinned for a copy that waits its turn
		if q.op == nil {
			continue // a load's request: its blocks count with t.fetches
		}
		for _, id := range q.op.blocks {
			copies[id]++
		}
	}
	for _, op := range t.fetches {
		for _, id := range op.blocks {
			copies[id]++
		}
	}
	for id, f := range t.flags {
		b := blockpool.BlockID(id)
		if f&flagMoving != 0 && t.pool.Pinned(b) == 0 {
			return fmt.Errorf("gpu tier: block %d is moving but not pinned", id)
		}
		if n := t.pool.Pinned(b); n != copies[b] {
			return fmt.Errorf("gpu tier: block %d has %d pins, %d copies in flight", id, n, copies[b])
		}
	}
	for seq, d := range t.demand { // kept until the sequence is computed or freed
		if _, err := t.pool.NumTokens(seq); err != nil || d.w.seq != seq {
			return fmt.Errorf("gpu tier: demand kept for sequence %d (allocation of %d), which the pool does not hold: %v", seq, d.w.seq, err)
		}
	}
	for seq := range t.classed { // until the free (disown)
		if _, err := t.pool.NumTokens(seq); err != nil {
			return fmt.Errorf("gpu tier: sequence %d classed by a commit, which the pool does not hold: %v", seq, err)
		}
	}
	claimed, published := 0, 0 // every block with flagPublished is on its publisher's list, once
	for seq, id := range t.claimHead {
		if id == noBlock { // an entry lives while its sequence claims a block
			return fmt.Errorf("gpu tier: sequence %d kept on the claim lists with no block", seq)
		}
		for prev := noBlock; id != noBlock; prev, id = id, t.claimNext[id] {
			if id < 0 || int(id) >= len(t.flags) {
				return fmt.Errorf("gpu tier: block %d on the claim list of sequence %d is not in the pool (%d blocks)", id, seq, len(t.flags))
			}
			if claimed++; claimed > len(t.flags) {
				return fmt.Errorf("gpu tier: the claimed blocks of sequence %d loop", seq)
			}
			if t.flags[id]&flagPublished == 0 || t.publisher[id] != seq || t.claimPrev[id] != prev {
				return fmt.Errorf("gpu tier: block %d on the claim list of sequence %d: published flag %v, publisher %d, previous %d (want %d)",
					id, seq, t.flags[id]&flagPublished != 0, t.publisher[id], t.claimPrev[id], prev)
			}
		}
	}
	for _, f := range t.flags {
		if f&flagPublished != 0 {
			published++
		}
	}
	if claimed != published {
		return fmt.Errorf("gpu tier: the claim lists hold %d blocks, %d blocks have a publisher", claimed, published)
	}
	for seq := range t.seqClass { // dropped at the free
		if _, err := t.pool.NumTokens(seq); err != nil {
			return fmt.Errorf("gpu tier: class kept for sequence %d, which the pool does not hold: %v", seq, err)
		}
	}
	for w := range t.orphans { // kept until the freed sequence's loads are over
		if w.pending <= 0 {
			return fmt.Errorf("gpu tier: demand kept for freed sequence %d with no load in flight", w.seq)
		}
	}
	return nil
}
