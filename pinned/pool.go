package pinned

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/kvtier/kvtier/policy"
)

// slot is the bookkeeping of one slot; its bytes live in Pool.mem.
type slot struct {
	key     Key
	refs    int32
	state   State
	below   bool   // the tier below holds a copy of the contents (SetBelow)
	fetches uint16 // reads of the contents so far (CountFetch)
}

// Pool is a fixed set of page-aligned host memory slots with a slot
// lifecycle, a key index, reader reference counts and an eviction policy.
// It is not safe for concurrent use: one owner calls it, and copy workers
// only touch slot bytes under the rules in the package doc.
type Pool struct {
	layout
	mem     []byte
	freeMem func() error
	locked  bool
	closed  bool

	slots []slot
	free  []int32        // stack of Free slots; the most recently freed is reused first
	index map[Key]int32  // keys of Filling and Resident slots
	pol   policy.Policy  // keys of Resident slots
	count [numStates]int // slots per state
	refs  int            // reader references over all slots

	evictable func(Key) bool // bound once so Evict does not allocate

	hits, misses, evictions, classHints uint64
}

// New validates cfg, allocates the pool's memory and returns a pool with
// every slot Free. It returns a *ConfigError (wrapping ErrBadConfig) for a
// bad field, or an error wrapping both ErrAlloc and the allocator's error
// (an ENOMEM from mmap, gpu.ErrOutOfMemory from a device) when the memory
// cannot be had. cfg is not modified. The
// caller must Close the pool to release its memory.
func New(cfg Config) (*Pool, error) {
	l, err := cfg.validate(pageSize)
	if err != nil {
		return nil, err
	}
	size := l.slots * l.stride
	alloc := cfg.Alloc
	if alloc == nil {
		lock := cfg.Lock
		alloc = func(bytes int) ([]byte, bool, func() error, error) { return mmapAlloc(bytes, lock) }
	}
	mem, locked, free, err := alloc(size)
	if err != nil {
		return nil, fmt.Errorf("%w: %d bytes for %d slots of %d bytes: %w", ErrAlloc, size, l.slots, l.stride, err)
	}
	if free == nil {
		free = func() error { return nil }
	}
	if err := checkMemory(mem, size, l.pageSize); err != nil {
		return nil, errors.Join(fmt.Errorf("%w: %w", ErrAlloc, err), free())
	}
	pol, err := policy.New(l.kind, l.slots)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("kvtier: pinned: %w", err), free())
	}
	p := &Pool{
		layout:  l,
		mem:     mem[:size:size],
		freeMem: free,
		locked:  locked,
		slots:   make([]slot, l.slots),
		free:    make([]int32, l.slots),
		index:   make(map[Key]int32, l.slots),
		pol:     pol,
	}
	for i := range p.slots {
		p.slots[i].state = StateFree
		p.free[i] = int32(l.slots - 1 - i) // slot 0 is handed out first
	}
	p.count[StateFree] = l.slots
	p.evictable = func(k Key) bool { return p.slots[p.index[k]].refs == 0 }
	return p, nil
}

// checkMemory rejects memory from an allocator that is too short or not
// page aligned.
func checkMemory(mem []byte, size, page int) error {
	if len(mem) < size {
		return fmt.Errorf("kvtier: pinned: allocator returned %d bytes, want %d", len(mem), size)
	}
	if addr := uintptr(unsafe.Pointer(unsafe.SliceData(mem))); addr%uintptr(page) != 0 {
		return fmt.Errorf("kvtier: pinned: allocator returned memory at %#x, not aligned to %d-byte pages", addr, page)
	}
	return nil
}

// NumSlots returns the number of slots.
func (p *Pool) NumSlots() int { return p.layout.slots }

// SlotBytes returns the usable size of one slot (Config.SlotBytes).
func (p *Pool) SlotBytes() int { return p.slotBytes }

// Locked reports whether the pool's memory is locked in RAM. It keeps
// answering after Close.
func (p *Pool) Locked() bool { return p.locked }

// Bytes returns slot's memory: SlotBytes long (capacity too), starting on a
// page boundary. Who may read or write it depends on the slot's state; see
// "Ownership of slot bytes" in the package doc. The slice must not be used
// after the slot becomes Free or the pool is closed. Bytes panics for a Free
// slot.
func (p *Pool) Bytes(slot int) []byte {
	s := p.at(slot)
	if s.state == StateFree {
		panic(fmt.Sprintf("kvtier: pinned: Bytes of free slot %d", slot))
	}
	off := slot * p.stride
	return p.mem[off : off+p.slotBytes : off+p.slotBytes]
}

// State returns slot's state.
func (p *Pool) State(slot int) State { return p.at(slot).state }

// Close releases the pool's memory. It returns ErrInUse, and leaves the
// pool open, while any slot is Filling, Doomed or Draining or has readers:
// unmapping memory a copy worker still uses would crash it. A second Close
// returns ErrClosed. After Close, Stats and Locked still answer and every
// other method panics.
func (p *Pool) Close() error {
	if p.closed {
		return ErrClosed
	}
	if busy := p.count[StateFilling] + p.count[StateDoomed] + p.count[StateDraining]; busy > 0 || p.refs > 0 {
		return fmt.Errorf("kvtier: pinned: close with %d filling, %d doomed, %d draining slots and %d readers: %w",
			p.count[StateFilling], p.count[StateDoomed], p.count[StateDraining], p.refs, ErrInUse)
	}
	p.closed = true
	p.mem = nil
	if err := p.freeMem(); err != nil {
		return fmt.Errorf("kvtier: pinned: release memory: %w", err)
	}
	return nil
}

// Discard closes the pool whatever state its slots are in: filling, draining
// or read slots are dropped with their bookkeeping. Only for an owner that
// knows no copy worker or I/O can touch slot memory any more (its streams
// drained, its I/O workers stopped), such as a Manager shutting down after its
// actors stopped. A second call returns ErrClosed.
func (p *Pool) Discard() error {
	if p.closed {
		return ErrClosed
	}
	p.closed = true
	p.mem = nil
	if err := p.freeMem(); err != nil {
		return fmt.Errorf("kvtier: pinned: release memory: %w", err)
	}
	return nil
}

// at returns slot's bookkeeping, panicking on a closed pool or a slot out
// of range.
func (p *Pool) at(slot int) *slot {
	p.mustOpen()
	if slot < 0 || slot >= len(p.slots) {
		panic(fmt.Sprintf("kvtier: pinned: slot %d out of range [0, %d)", slot, len(p.slots)))
	}
	return &p.slots[slot]
}

func (p *Pool) mustOpen() {
	if p.closed {
		panic("kvtier: pinned: use of closed Pool")
	}
}

// setState moves slot i to state to, keeping the per-state counts.
func (p *Pool) setState(i int32, to State) {
	s := &p.slots[i]
	p.count[s.state]--
	p.count[to]++
	s.state = to
}

// release returns slot i to the free list.
func (p *Pool) release(i int32) {
	p.setState(i, StateFree)
	p.slots[i].key, p.slots[i].below, p.slots[i].fetches = 0, false, 0
	p.free = append(p.free, i)
}

// SetBelow records whether the tier below holds a copy of the contents of
// slot, which must hold a key (Filling, Resident, Draining or Doomed). The
// record lives as long as the contents: it is cleared when the slot is freed,
// so it is exact and costs nothing per key that left.
func (p *Pool) SetBelow(slot int, below bool) {
	s := p.at(slot)
	if s.state == StateFree {
		panic(fmt.Sprintf("kvtier: pinned: SetBelow of free slot %d", slot))
	}
	s.below = below
}

// Key returns the key slot holds (0 for a free slot).
func (p *Pool) Key(slot int) Key { return p.at(slot).key }

// Below reports what SetBelow recorded for slot's contents.
func (p *Pool) Below(slot int) bool { return p.at(slot).below }

// CountFetch counts one more read of slot's contents and returns the count
// (saturating), for ingestion policies that write hot contents down.
func (p *Pool) CountFetch(slot int) int {
	s := p.at(slot)
	if s.fetches < 1<<16-1 {
		s.fetches++
	}
	return int(s.fetches)
}
