package disk

import (
	"errors"
	"fmt"
	"maps"
)

// CheckInvariants walks the whole store and reports the first
// inconsistency between slots, the free stack, the index, the policy, pins
// and in-flight reads. It is O(slots); tests call it after every step and
// builds with the invariants tag call it after every completion.
func (s *Store) CheckInvariants() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("kvtier: disk: invariant: "+format, args...))
	}
	inFree := make([]bool, len(s.slots))
	for _, i := range s.free {
		if inFree[i] {
			bad("slot %d twice on the free stack", i)
		}
		inFree[i] = true
	}
	var free, writing, live, doomed, pinned, removing int
	overwriting := map[uint64]int{}
	staleHeld := map[uint64]int{}
	staleUnknown := 0
	for i := range s.slots {
		sl := &s.slots[i]
		if sl.pins < 0 {
			bad("slot %d has %d pins", i, sl.pins)
		}
		if sl.pins > 0 {
			pinned++
		}
		for _, h := range sl.staleHashes {
			staleHeld[h]++
		}
		if sl.staleUnknown {
			staleUnknown++
			if !sl.stale && sl.state != slotWriting { // a write keeps it until it lands
				bad("slot %d holds an unread header but is not stale", i)
			}
		}
		if sl.state == slotLive && len(sl.staleHashes) > 0 {
			bad("live slot %d still counts stale records %x", i, sl.staleHashes)
		}
		if inFree[i] != (sl.state == slotFree) {
			bad("slot %d state %d but on free stack = %t", i, sl.state, inFree[i])
		}
		switch sl.state {
		case slotFree:
			free++
			if sl.scrubbing {
				bad("free slot %d marked scrubbing", i)
			}
			if sl.pins != 0 {
				bad("free slot %d pinned", i)
			}
		case slotWriting, slotLive:
			if sl.state == slotWriting {
				writing++
				if sl.overwriting {
					overwriting[sl.overwrites]++
				}
				if sl.pins != 0 {
					bad("slot %d pinned while being written", i)
				}
			} else {
				live++
				if !s.pol.Contains(sl.meta.Hash) {
					bad("live slot %d hash %016x not in policy", i, sl.meta.Hash)
				}
			}
			if j, ok := s.index[sl.meta.Hash]; !ok || int(j) != i {
				bad("slot %d hash %016x indexed at %d (%t)", i, sl.meta.Hash, j, ok)
			}
		case slotDoomed:
			doomed++
			if sl.scrubbing {
				removing++
			}
			if sl.pins == 0 && !sl.scrubbing {
				bad("doomed slot %d has no pins and no removal", i)
			}
			if j, ok := s.index[sl.meta.Hash]; ok && int(j) == i {
				bad("doomed slot %d still indexed", i)
			}
		}
	}
	if len(s.index) != writing+live {
		bad("index has %d entries, %d writing + %d live slots", len(s.index), writing, live)
	}
	if s.pol.Len() != live {
		bad("policy has %d keys, %d live slots", s.pol.Len(), live)
	}
	if writing != s.writing || doomed != s.doomed || pinned != s.pinned || removing != s.removing {
		bad("counters writing=%d doomed=%d pinned=%d removing=%d, walk found %d %d %d %d",
			s.writing, s.doomed, s.pinned, s.removing, writing, doomed, pinned, removing)
	}
	if staleUnknown != s.staleUnknown {
		bad("staleUnknown %d, slots with unread headers %d", s.staleUnknown, staleUnknown)
	}
	if !maps.Equal(staleHeld, s.staleHeld) {
		bad("staleHeld %v, slots hold %v", s.staleHeld, staleHeld)
	}
	if !maps.Equal(overwriting, s.overwriting) {
		bad("overwriting %v, writing slots overwrite %v", s.overwriting, overwriting)
	}
	if free+writing+live+doomed != len(s.slots) {
		bad("states sum to %d of %d slots", free+writing+live+doomed, len(s.slots))
	}
	for h, op := range s.reads {
		if op.hash != h || op.done || s.slots[op.slot].pins == 0 {
			bad("in-flight read %016x: hash %016x done=%t pins=%d", h, op.hash, op.done, s.slots[op.slot].pins)
		}
	}
	return errors.Join(errs...)
}

func (s *Store) mustCheck() {
	if err := s.CheckInvariants(); err != nil {
		panic(err.Error())
	}
}
