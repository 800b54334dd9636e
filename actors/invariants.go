package actors

import (
	"fmt"
)

// checkPinned is the pinned actor's consistency walk: the pool's invariants, and
// the actor's books on slots in flight agree with the pool.
func (a *PinnedActor) checkPinned() error {
	if err := a.pool.CheckInvariants(); err != nil {
		return err
	}
	if a.inFlight != len(a.fillEp) {
		return fmt.Errorf("pinned actor: %d offloads in flight, %d slots with an epoch", a.inFlight, len(a.fillEp))
	}
	if len(a.draining) != len(a.drainEp) {
		return fmt.Errorf("pinned actor: %d slots at the disk, %d with an epoch", len(a.draining), len(a.drainEp))
	}
	st := a.pool.Stats()
	if drains := a.drainingCount() + len(a.drained); drains != st.Draining {
		return fmt.Errorf("pinned actor: %d slots draining or awaiting readers by its books, pool says %d", drains, st.Draining)
	}
	// A draining block whose chain was deleted keeps its slot key but is no
	// longer served (it leaves drainOf).
	if len(a.drainOf) > len(a.drainKey) || len(a.drainKey) != a.drainingCount() {
		return fmt.Errorf("pinned actor: %d draining hashes, %d draining slot keys, %d draining slots", len(a.drainOf), len(a.drainKey), a.drainingCount())
	}
	for h, s := range a.drainOf {
		if a.drainKey[s] != h {
			return fmt.Errorf("pinned actor: draining hash %016x points at slot %d, which drains %016x", h, s, a.drainKey[s])
		}
	}
	for s := range a.drained {
		if a.readers[s] == 0 {
			return fmt.Errorf("pinned actor: slot %d waits for readers it does not have", s)
		}
	}
	n := 0
	for _, c := range a.pending {
		n += c
	}
	if want := len(a.fillEp) + len(a.drainEp) + len(a.queue) + len(a.reads) + len(a.readQ); n != want {
		return fmt.Errorf("pinned actor: %d epoch-counted items, %d in flight", n, want)
	}
	return nil
}

func mustHold(err error) {
	if err != nil {
		panic("kvtier: invariants: " + err.Error())
	}
}
