package disk

import (
	"errors"
	"io"
	"time"

	"golang.org/x/sys/unix"
)

// IOMode says how the store talks to its files.
type IOMode int

const (
	// IODirect means O_DIRECT: no page cache, aligned buffers.
	IODirect IOMode = iota + 1
	// IOBuffered means the page cache, plus fdatasync when Config.Sync.
	IOBuffered
)

func (m IOMode) String() string {
	switch m {
	case IODirect:
		return "direct"
	case IOBuffered:
		return "buffered"
	default:
		return "IOMode(?)"
	}
}

// ErrorCounts counts failed operations by kind.
type ErrorCounts struct {
	EIO     int64 // unix.EIO
	ENOSPC  int64 // unix.ENOSPC
	Short   int64 // short or torn transfer (io.ErrShortWrite, io.EOF, ...)
	Corrupt int64 // ErrCorrupt: a record failed verification
	Other   int64
}

// Total returns the sum of all kinds.
func (c ErrorCounts) Total() int64 { return c.EIO + c.ENOSPC + c.Short + c.Corrupt + c.Other }

func (c *ErrorCounts) count(err error) {
	switch {
	case errors.Is(err, ErrCorrupt):
		c.Corrupt++
	case errors.Is(err, unix.EIO):
		c.EIO++
	case errors.Is(err, unix.ENOSPC):
		c.ENOSPC++
	case errors.Is(err, io.ErrShortWrite), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		c.Short++
	default:
		c.Other++
	}
}

// Stats is a snapshot of a Store's state and counters.
type Stats struct {
	Mode IOMode
	// Slot states; they sum to Slots.
	Slots, Free, Live, Writing, Doomed int
	// Pinned is the number of slots held by planned reads.
	Pinned int
	// Removing is the number of doomed slots whose RemoveOp has not
	// completed.
	Removing int
	// Writes and Reads count successfully completed operations; a
	// coalesced read counts once, its extra waiters in ReadWaiters.
	Writes, Reads, ReadWaiters int64
	WriteErrors, ReadErrors    ErrorCounts
	// RemoveErrors counts removals whose header scrub failed: the block
	// is gone from the store but may come back after a crash.
	RemoveErrors       ErrorCounts
	Evictions, Removes int64
	// Displaced counts live records that a write of the same hash with
	// another digest replaced (PlanWrite; also counted in Evictions).
	Displaced int64
	// VerifyMismatch counts reads refused because the block's digest was
	// not the one the reader expected: at plan time (a miss, the block
	// stays) or in the header read back (also counted in
	// ReadErrors.Corrupt; the block is dropped).
	VerifyMismatch          int64
	BytesWritten, BytesRead int64
	// MissesObserved counts the misses Miss passed to the eviction policy.
	MissesObserved int64
	// ClassHints counts the writes that landed with a class
	// (Meta.Class) the eviction policy read (policy.Hinted).
	ClassHints int64
	// NextGeneration is the generation the next planned write gets.
	NextGeneration uint64
}

// DropReason says why Open discarded a record.
type DropReason int

const (
	// DropMagic: the header block is neither empty nor a kvtier record.
	DropMagic DropReason = iota + 1
	// DropHeaderChecksum: the header checksum does not match (torn or
	// flipped header).
	DropHeaderChecksum
	// DropVersion: another format or hash-scheme version.
	DropVersion
	// DropFingerprint: written for another model or layout.
	DropFingerprint
	// DropGeometry: written with another slot size, or a payload length
	// that does not fit the slot.
	DropGeometry
	// DropDuplicate: an older generation of a hash stored twice.
	DropDuplicate
	// DropIOError: the header could not be read.
	DropIOError
	// DropCapacity: the record lay past a smaller Config.CapacityBytes, or
	// in a slot file past a smaller Config.Files, and was cut away with
	// that part of the store (counted before the cut; its header is gone
	// with it).
	DropCapacity
)

func (r DropReason) String() string {
	switch r {
	case DropMagic:
		return "magic"
	case DropHeaderChecksum:
		return "header-checksum"
	case DropVersion:
		return "version"
	case DropFingerprint:
		return "fingerprint"
	case DropGeometry:
		return "geometry"
	case DropDuplicate:
		return "duplicate"
	case DropIOError:
		return "io-error"
	case DropCapacity:
		return "capacity"
	default:
		return "DropReason(?)"
	}
}

// OpenReport says what Open found on disk.
type OpenReport struct {
	// Records is the number of records indexed.
	Records int
	// Dropped counts discarded records by reason; their header blocks are
	// zeroed so later opens do not see them again (those a smaller store
	// cut away, DropCapacity, are gone with that part of it).
	Dropped map[DropReason]int
	// BadChains counts records indexed whose chain extension (Meta.Chain)
	// did not verify: they open with no Chain, as records written before
	// the extension do.
	BadChains int
	// Mode is the I/O mode in use.
	Mode IOMode
	// Duration is how long Open took, scan included.
	Duration time.Duration
}

// DroppedTotal returns the number of dropped records.
func (r OpenReport) DroppedTotal() int {
	n := 0
	for _, c := range r.Dropped {
		n += c
	}
	return n
}
