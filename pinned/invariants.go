package pinned

import (
	"errors"
	"fmt"
)

// CheckInvariants walks all of the pool's state and returns an error
// describing every inconsistency found: per-state counts that do not add up,
// a free list that disagrees with the Free slots, an index entry that does
// not point at a Filling or Resident slot of the same key, a policy that
// does not hold exactly the Resident keys, and reader counts on slots that
// cannot have readers. It is O(slots); tests call it, and the invariants
// build tag runs it after every mutating call.
func (p *Pool) CheckInvariants() error {
	p.mustOpen()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	var count [numStates]int
	refs := 0
	for i, s := range p.slots {
		if s.state < StateFree || s.state > StateDraining {
			bad("slot %d: invalid state %v", i, s.state)
			continue
		}
		count[s.state]++
		refs += int(s.refs)
		switch {
		case s.refs < 0:
			bad("slot %d: %d readers", i, s.refs)
		case s.refs > 0 && s.state != StateResident && s.state != StateDoomed:
			bad("slot %d: %d readers in state %v", i, s.refs, s.state)
		case s.refs == 0 && s.state == StateDoomed:
			bad("slot %d: doomed without readers", i)
		}
		if s.state == StateFilling || s.state == StateResident {
			if j, ok := p.index[s.key]; !ok || int(j) != i {
				bad("slot %d (%v): key %#x indexed at %d, %v", i, s.state, s.key, j, ok)
			}
		}
		if inPolicy := p.pol.Contains(s.key); s.state == StateResident && !inPolicy {
			bad("slot %d: resident key %#x not in policy", i, s.key)
		} else if s.state == StateFilling && inPolicy {
			bad("slot %d: filling key %#x in policy", i, s.key)
		}
	}
	if count != p.count {
		bad("state counts %v, recounted %v", p.count, count)
	}
	if refs != p.refs {
		bad("reader total %d, recounted %d", p.refs, refs)
	}

	if len(p.free) != count[StateFree] {
		bad("free list holds %d slots, %d are free", len(p.free), count[StateFree])
	}
	seen := make([]bool, len(p.slots))
	for _, i := range p.free {
		switch {
		case i < 0 || int(i) >= len(p.slots):
			bad("free list: slot %d out of range", i)
		case seen[i]:
			bad("free list: slot %d twice", i)
		case p.slots[i].state != StateFree:
			bad("free list: slot %d is %v", i, p.slots[i].state)
		default:
			seen[i] = true
		}
	}

	if want := count[StateFilling] + count[StateResident]; len(p.index) != want {
		bad("index holds %d keys, want %d filling+resident", len(p.index), want)
	}
	for k, i := range p.index {
		if i < 0 || int(i) >= len(p.slots) {
			bad("index: key %#x -> slot %d out of range", k, i)
			continue
		}
		if s := p.slots[i]; s.key != k || (s.state != StateFilling && s.state != StateResident) {
			bad("index: key %#x -> slot %d holding %#x in state %v", k, i, s.key, s.state)
		}
	}
	if p.pol.Len() != count[StateResident] {
		bad("policy holds %d keys, %d slots are resident", p.pol.Len(), count[StateResident])
	}
	return errors.Join(errs...)
}

// checkAfter panics if invariants checking is built in and op left the
// pool inconsistent.
func (p *Pool) checkAfter(op string) {
	if !invariantsEnabled {
		return
	}
	if err := p.CheckInvariants(); err != nil {
		panic(fmt.Sprintf("kvtier: pinned: invariant violated after %s: %v", op, err))
	}
}
