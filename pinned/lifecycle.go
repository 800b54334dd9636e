package pinned

import (
	"fmt"

	"github.com/kvtier/kvtier/policy"
)

// Victim is a slot chosen by Evict: Key left the pool's index and policy,
// and Slot is Draining until the caller frees it.
type Victim struct {
	Key  Key
	Slot int
}

// Reserve takes a free slot for k and puts it in state Filling. The caller
// owns the reservation: it must end it with Commit or Abort, and may hand
// the slot's bytes to exactly one writer meanwhile. It returns ErrExists if
// k is already Resident or Filling, and ErrNoSpace if no slot is free; in
// both cases nothing changes.
func (p *Pool) Reserve(k Key) (slot int, err error) {
	p.mustOpen()
	if _, ok := p.index[k]; ok {
		return -1, ErrExists
	}
	n := len(p.free)
	if n == 0 {
		return -1, ErrNoSpace
	}
	i := p.free[n-1]
	p.free = p.free[:n-1]
	p.setState(i, StateFilling)
	p.slots[i].key = k
	p.index[k] = i
	p.checkAfter("Reserve")
	return int(i), nil
}

// Commit makes a Filling slot Resident: readable, findable by its key and
// ordered by the policy. The writer must be done with the bytes. It panics
// if slot is not Filling. It is CommitClass with class 0 (unknown).
func (p *Pool) Commit(slot int) { p.CommitClass(slot, 0) }

// CommitClass is Commit of a block whose class (policy.Hint.Class: that of
// the request that brought it in, 0 unknown) the policy learns from, when
// it reads hints (policy.Hinted, as policy.Adaptive does).
func (p *Pool) CommitClass(slot int, class uint8) {
	s := p.inState(slot, StateFilling, "Commit")
	p.setState(int32(slot), StateResident)
	if policy.AddClass(p.pol, s.key, class) {
		p.classHints++
	}
	p.checkAfter("Commit")
}

// Abort gives up a Filling slot (the fill failed or was cancelled) and
// frees it. The writer must be done with the bytes. It panics if slot is
// not Filling.
func (p *Pool) Abort(slot int) {
	s := p.inState(slot, StateFilling, "Abort")
	delete(p.index, s.key)
	p.release(int32(slot))
	p.checkAfter("Abort")
}

// Lookup returns k's slot if k is Resident. It takes no reference and
// counts nothing.
func (p *Pool) Lookup(k Key) (slot int, ok bool) {
	p.mustOpen()
	i, ok := p.index[k]
	if !ok || p.slots[i].state != StateResident {
		return -1, false
	}
	return int(i), true
}

// Filling returns k's slot if k is Filling (reserved, its writer not done).
// It takes no reference and counts nothing.
func (p *Pool) Filling(k Key) (slot int, ok bool) {
	p.mustOpen()
	i, ok := p.index[k]
	if !ok || p.slots[i].state != StateFilling {
		return -1, false
	}
	return int(i), true
}

// Acquire takes a reader reference on k's slot if k is Resident, records
// the access with the policy and counts a hit; otherwise it counts a miss
// (a Filling key is a miss). The caller owns the reference and must pass
// the slot to Release exactly once; until then the slot is not evicted and
// its bytes may be read.
func (p *Pool) Acquire(k Key) (slot int, ok bool) {
	slot, ok = p.Hold(k)
	if !ok {
		p.misses++
		return -1, false
	}
	p.hits++
	p.pol.Access(k)
	return slot, true
}

// Hold takes a reader reference on k's slot if k is Resident, as Acquire
// does, but records no access and counts no hit: for the tier's own reads
// of a block (a write-through to the tier below), which are not uses. The
// caller passes the slot to Release exactly once.
func (p *Pool) Hold(k Key) (slot int, ok bool) {
	slot, ok = p.Lookup(k)
	if !ok {
		return -1, false
	}
	p.slots[slot].refs++
	p.refs++
	p.checkAfter("Hold")
	return slot, true
}

// Release drops a reader reference taken by Acquire or Hold. Releasing the last
// reference of a Doomed slot frees it. It panics if the slot has no
// readers.
func (p *Pool) Release(slot int) {
	s := p.at(slot)
	if s.refs <= 0 || (s.state != StateResident && s.state != StateDoomed) {
		panic(fmt.Sprintf("kvtier: pinned: Release of slot %d (%v) with no readers", slot, s.state))
	}
	s.refs--
	p.refs--
	if s.refs == 0 && s.state == StateDoomed {
		p.release(int32(slot))
	}
	p.checkAfter("Release")
}

// Evict chooses up to n victims among Resident slots without readers, in
// the policy's order, and moves them to Draining. The caller owns the
// victims: it may read their bytes (to move them to a lower tier) and must
// pass each slot to Free. It returns fewer than n victims, possibly none,
// when no more slots are evictable.
func (p *Pool) Evict(n int) []Victim {
	return p.AppendEvict(nil, n)
}

// AppendEvict is Evict appending the victims to dst, so a caller can reuse
// one buffer and evict without allocating.
func (p *Pool) AppendEvict(dst []Victim, n int) []Victim {
	p.mustOpen()
	for ; n > 0; n-- {
		k, ok := p.pol.Evict(p.evictable)
		if !ok {
			break
		}
		i := p.index[k]
		delete(p.index, k)
		p.setState(i, StateDraining)
		p.evictions++
		dst = append(dst, Victim{Key: k, Slot: int(i)})
	}
	p.checkAfter("Evict")
	return dst
}

// EvictOne evicts one victim as Evict does and frees its slot at once, for
// a tier with no lower tier to move the bytes to. It returns false if no
// slot is evictable.
func (p *Pool) EvictOne() (Key, bool) {
	var buf [1]Victim
	v := p.AppendEvict(buf[:0], 1)
	if len(v) == 0 {
		return 0, false
	}
	p.Free(v[0].Slot)
	return v[0].Key, true
}

// Free returns a Draining slot to the free list. Readers of its bytes must
// be done. It panics if slot is not Draining.
func (p *Pool) Free(slot int) {
	p.inState(slot, StateDraining, "Free")
	p.release(int32(slot))
	p.checkAfter("Free")
}

// Remove drops a Resident key from the pool (deleted, or moved to another
// tier by the caller). A slot without readers is freed at once; a slot with
// readers becomes Doomed and is freed by the last Release. It returns false
// if k is not Resident; a Filling key is ended with Abort instead.
func (p *Pool) Remove(k Key) bool {
	slot, ok := p.Lookup(k)
	if !ok {
		return false
	}
	i := int32(slot)
	delete(p.index, k)
	p.pol.Remove(k)
	if p.slots[i].refs > 0 {
		p.setState(i, StateDoomed)
	} else {
		p.release(i)
	}
	p.checkAfter("Remove")
	return true
}

// inState returns slot's bookkeeping, panicking unless it is in state want.
func (p *Pool) inState(slot int, want State, op string) *slot {
	s := p.at(slot)
	if s.state != want {
		panic(fmt.Sprintf("kvtier: pinned: %s of slot %d in state %v, want %v", op, slot, s.state, want))
	}
	return s
}
