package disk

import (
	"errors"
	"fmt"
	"io"

	"go.uber.org/zap"

	"github.com/kvtier/kvtier/policy"
)

// slotState is the life cycle of a slot:
//
//	free -> writing (PlanWrite) -> live (CompleteWrite ok) or free (failed:
//	        Execute zeroed the header, or the slot is left stale for Close)
//	live -> free (evicted, corrupt) when unpinned
//	live -> doomed (corrupt while pinned) -> free (last unpin)
//	live -> doomed, scrubbing (PlanRemove) -> free (CompleteRemove and the
//	        last unpin, whichever comes last)
type slotState uint8

const (
	slotFree slotState = iota
	slotWriting
	slotLive
	slotDoomed
)

type slot struct {
	state      slotState
	pins       int32 // planned reads not yet completed
	meta       Meta
	generation uint64
	payloadLen int64
	// stale marks a free (or doomed) slot whose header block may still
	// hold a valid record that was removed; Close zeroes such headers.
	stale bool
	// staleHashes are the blocks whose records the header may still hold,
	// where known (Store.staleHeld counts them): kept while the slot is
	// stale and while a write over it is in flight.
	staleHashes []uint64
	// staleUnknown marks a stale slot whose header Open could not read:
	// it may hold a record of any hash (Store.staleUnknown counts them).
	staleUnknown bool
	// scrubbing marks a doomed slot whose RemoveOp has not completed.
	scrubbing bool
	// overwrites, in a writing slot PlanWrite evicted a block from, is
	// that block's hash (overwriting set): its header stays in the slot
	// until the write's header lands, or the failed write zeroes it.
	overwrites  uint64
	overwriting bool
}

// Store is a crash-consistent block store over preallocated slot files.
//
// A Store is not safe for concurrent use: one owner goroutine calls all of
// its methods. The blocking I/O lives in WriteOp.Execute and ReadOp.Execute,
// which touch no Store state and may run on any goroutine between the plan
// and the complete call that bracket them.
type Store struct {
	cfg    Config
	log    *zap.Logger
	lay    layout
	mode   IOMode
	files  []File
	lock   io.Closer
	slots  []slot
	free   []int32            // stack of free slots; the top is reused first
	index  map[uint64]int32   // hash -> slot, for live and writing slots
	reads  map[uint64]*ReadOp // in-flight reads, for coalescing
	pol    policy.Policy
	hdrs   [][]byte // pool of aligned header buffers
	zero   []byte   // one zero header block, shared read-only by RemoveOps
	gen    uint64   // next generation
	closed bool

	writing, doomed, pinned, removing int
	// overwriting counts, per hash, the writing slots whose header is
	// still that evicted block's (slot.overwrites).
	overwriting map[uint64]int
	// staleHeld counts, per hash, the slots whose headers may still hold
	// a record of it (slot.staleHashes): a failed read dropped it, or a
	// failed write (or scrub) could not zero the header.
	staleHeld map[uint64]int
	// staleUnknown counts the stale slots whose header Open could not read
	// (slot.staleUnknown): while one is left, no removal is durable.
	staleUnknown int

	// splitWriteMin is the smallest payload written apart from its header
	// (defaultSplitWriteMin; benchmarks move it to compare both ways).
	splitWriteMin int

	stats Stats
}

// Mode reports whether the store uses O_DIRECT or buffered I/O.
func (s *Store) Mode() IOMode { return s.mode }

// Slots returns the number of slots.
func (s *Store) Slots() int { return s.lay.slots }

// PayloadBytes returns the largest payload a block may carry.
func (s *Store) PayloadBytes() int { return s.cfg.PayloadBytes }

// Len returns the number of live (readable) blocks.
func (s *Store) Len() int { return s.pol.Len() }

// Contains reports whether hash is stored and readable. A block being
// written is not contained until CompleteWrite.
func (s *Store) Contains(hash uint64) bool {
	i, ok := s.index[hash]
	return ok && s.slots[i].state == slotLive
}

// ObservesMisses reports whether the store's eviction policy learns from
// Miss (policy.MissObserver).
func (s *Store) ObservesMisses() bool {
	_, ok := s.pol.(policy.MissObserver)
	return ok
}

// Miss tells the eviction policy that hashes were asked for and the store
// lacks them; it skips a hash whose block is stored or being written, and
// does nothing when the policy does not learn from misses. It does no I/O.
func (s *Store) Miss(hashes ...uint64) {
	mo, ok := s.pol.(policy.MissObserver)
	if !ok || s.closed {
		return
	}
	for _, h := range hashes {
		if _, held := s.index[h]; !held {
			mo.Miss(h)
			s.stats.MissesObserved++
		}
	}
}

// WritingMeta returns the metadata of hash's write planned and not yet
// completed, if there is one.
func (s *Store) WritingMeta(hash uint64) (Meta, bool) {
	i, ok := s.index[hash]
	if !ok || s.slots[i].state != slotWriting {
		return Meta{}, false
	}
	return s.slots[i].meta, true
}

// Overwriting reports whether a write in flight is overwriting a slot whose
// header is still a record of hash: PlanWrite evicted hash there, and the
// header goes when the write lands or, failing, zeroes it. A removal of
// hash is durable only once no write overwrites it: until then a crash
// would bring the evicted record back at Open (RemoveSync then returns
// ErrNotDurable; the disk actor answers a delete after those writes).
func (s *Store) Overwriting(hash uint64) bool { return s.overwriting[hash] > 0 }

// Writing reports whether hash has a write planned and not yet completed.
func (s *Store) Writing(hash uint64) bool {
	_, ok := s.WritingMeta(hash)
	return ok
}

// Meta returns the metadata of a live block.
func (s *Store) Meta(hash uint64) (Meta, bool) {
	i, ok := s.index[hash]
	if !ok || s.slots[i].state != slotLive {
		return Meta{}, false
	}
	return s.slots[i].meta, true
}

// Range calls fn for every live block, in no particular order, until fn
// returns false. fn must not call back into the Store.
func (s *Store) Range(fn func(Meta) bool) {
	for _, i := range s.index {
		if s.slots[i].state == slotLive && !fn(s.slots[i].meta) {
			return
		}
	}
}

// ReleaseChains lets go of the chains Open read from the records
// (Meta.Chain): the owner calls it once it has announced them, so that a
// large store does not keep every block's token ids in memory for the
// rest of its life. Meta and Range return no Chain afterwards.
func (s *Store) ReleaseChains() {
	for i := range s.slots {
		s.slots[i].meta.Chain = nil
	}
}

// unpublish takes live slot i out of the index and the policy. With scrub
// it dooms the slot until a RemoveOp zeroes its header; otherwise it frees
// the slot, or dooms it while reads hold it.
func (s *Store) unpublish(i int32, scrub bool) {
	sl := &s.slots[i]
	delete(s.index, sl.meta.Hash)
	s.pol.Remove(sl.meta.Hash)
	if op, ok := s.reads[sl.meta.Hash]; ok && op.slot == i {
		// Later PlanReads miss; the op in flight finishes for its waiters.
		delete(s.reads, sl.meta.Hash)
		op.removed = scrub
	}
	if scrub {
		sl.stale = true // until the RemoveOp's scrub succeeds
	} else {
		s.markStale(i, sl.meta.Hash)
	}
	if scrub {
		sl.state = slotDoomed
		sl.scrubbing = true
		s.doomed++
		s.removing++
		return
	}
	if sl.pins > 0 {
		sl.state = slotDoomed
		s.doomed++
		return
	}
	s.release(i, true /* stale */)
}

// release returns slot i to the free stack; a slot not stale forgets the
// records its header held.
func (s *Store) release(i int32, stale bool) {
	if !stale {
		s.clearStale(i)
	}
	s.slots[i] = slot{state: slotFree, stale: stale, staleHashes: s.slots[i].staleHashes, staleUnknown: s.slots[i].staleUnknown}
	s.free = append(s.free, i)
}

// markStale marks slot i stale, its header possibly still holding records
// of hashes.
func (s *Store) markStale(i int32, hashes ...uint64) {
	sl := &s.slots[i]
	sl.stale = true
	for _, h := range hashes {
		sl.staleHashes = append(sl.staleHashes, h)
		s.staleHeld[h]++
	}
}

// clearStale records that slot i's header holds none of the records it may
// have held: it was zeroed or overwritten.
func (s *Store) clearStale(i int32) {
	sl := &s.slots[i]
	for _, h := range sl.staleHashes {
		if s.staleHeld[h]--; s.staleHeld[h] == 0 {
			delete(s.staleHeld, h)
		}
	}
	if sl.staleUnknown {
		s.staleUnknown--
	}
	sl.staleHashes, sl.stale, sl.staleUnknown = nil, false, false
}

// StaleHolds reports whether a slot's header may still hold a record of
// hash that its store dropped (a failed read) or could not zero (a failed
// write, or a failed scrub): until Close or a write over it zeroes the
// header, a crash would bring the record back, so a removal of hash is
// not durable (RemoveSync returns ErrNotDurable; the disk actor's delete
// says so). A header Open could neither read nor zero may hold any hash:
// while one is left, StaleHolds is true for every hash.
func (s *Store) StaleHolds(hash uint64) bool { return s.staleHeld[hash] > 0 || s.staleUnknown > 0 }

func (s *Store) getHeader() []byte {
	if n := len(s.hdrs); n > 0 {
		h := s.hdrs[n-1]
		s.hdrs = s.hdrs[:n-1]
		return h
	}
	return AlignedBuffer(BlockSize)
}

func (s *Store) putHeader(h []byte) { s.hdrs = append(s.hdrs, h) }

// Stats returns a snapshot of the counters and slot states.
func (s *Store) Stats() Stats {
	st := s.stats
	st.Mode = s.mode
	st.Slots = s.lay.slots
	st.Free = len(s.free)
	st.Live = s.pol.Len()
	st.Writing = s.writing
	st.Doomed = s.doomed
	st.Pinned = s.pinned
	st.Removing = s.removing
	st.NextGeneration = s.gen
	return st
}

// Close zeroes the headers of records still sitting in free slots (writes
// that failed, corrupt records, removals whose scrub failed),
// syncs and closes the files and releases the directory lock. It returns
// ErrBusy, and leaves the store open, while planned operations have not
// completed. Closing twice returns ErrClosed.
func (s *Store) Close() error {
	if s.closed {
		return ErrClosed
	}
	if s.writing > 0 || s.pinned > 0 || s.removing > 0 {
		return fmt.Errorf("%w: %d writes, %d pinned slots, %d removals", ErrBusy, s.writing, s.pinned, s.removing)
	}
	s.closed = true
	var errs []error
	zero := s.zero
	for _, i := range s.free {
		if !s.slots[i].stale {
			continue
		}
		f, off := s.lay.locate(int(i))
		if _, err := s.files[f].WriteAt(zero, off); err != nil {
			errs = append(errs, fmt.Errorf("kvtier: disk: scrub slot %d: %w", i, err))
			continue
		}
		s.clearStale(i)
	}
	for i, f := range s.files {
		if err := f.Sync(); err != nil {
			errs = append(errs, fmt.Errorf("kvtier: disk: sync %q: %w", slotFileName(s.cfg.Dir, i), err))
		}
	}
	if err := closeAll(s.files); err != nil {
		errs = append(errs, err)
	}
	if err := s.lock.Close(); err != nil {
		errs = append(errs, fmt.Errorf("kvtier: disk: unlock: %w", err))
	}
	return errors.Join(errs...)
}
