package pinned

// Stats is a snapshot of a pool's occupancy and counters.
type Stats struct {
	Slots    int // total slots
	Free     int // slots per state
	Filling  int
	Resident int
	Doomed   int
	Draining int
	Readers  int // reader references held over all slots

	SlotBytes   int   // usable bytes per slot
	SlotStride  int   // distance between slot starts (SlotBytes rounded up to a page)
	BytesMapped int64 // memory the pool holds
	BytesUsed   int64 // SlotBytes times the slots that are not Free

	Hits      uint64 // Acquire calls that found a Resident key
	Misses    uint64 // Acquire calls that did not
	Evictions uint64 // victims chosen by Evict and EvictOne
	// ClassHints counts the blocks CommitClass gave the policy with a
	// class (policy.Hint.Class), when the policy reads hints.
	ClassHints uint64

	Locked bool // memory is locked in RAM
}

// Stats returns the pool's counters. It is O(1) and keeps answering after
// Close (with the counts at Close).
func (p *Pool) Stats() Stats {
	return Stats{
		Slots:       len(p.slots),
		Free:        p.count[StateFree],
		Filling:     p.count[StateFilling],
		Resident:    p.count[StateResident],
		Doomed:      p.count[StateDoomed],
		Draining:    p.count[StateDraining],
		Readers:     p.refs,
		SlotBytes:   p.slotBytes,
		SlotStride:  p.stride,
		BytesMapped: int64(len(p.slots)) * int64(p.stride),
		BytesUsed:   int64(len(p.slots)-p.count[StateFree]) * int64(p.slotBytes),
		Hits:        p.hits,
		Misses:      p.misses,
		Evictions:   p.evictions,
		ClassHints:  p.classHints,
		Locked:      p.locked,
	}
}
