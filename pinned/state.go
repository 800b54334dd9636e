package pinned

import "strconv"

// State is the lifecycle state of one slot. See the package doc for the
// transitions.
type State uint8

// Slot states.
const (
	// StateFree slots hold nothing and are on the free list.
	StateFree State = iota + 1
	// StateFilling slots are reserved for a key whose bytes are being written.
	StateFilling
	// StateResident slots hold a readable block, are findable by key and are
	// ordered by the eviction policy.
	StateResident
	// StateDoomed slots were removed while they had readers; they are no
	// longer findable and become Free on the last Release.
	StateDoomed
	// StateDraining slots were chosen by Evict; their bytes stay valid until
	// Free.
	StateDraining

	numStates = int(StateDraining) + 1
)

// String returns the lower-case state name, or "State(n)".
func (s State) String() string {
	switch s {
	case StateFree:
		return "free"
	case StateFilling:
		return "filling"
	case StateResident:
		return "resident"
	case StateDoomed:
		return "doomed"
	case StateDraining:
		return "draining"
	default:
		return "State(" + strconv.Itoa(int(s)) + ")"
	}
}
