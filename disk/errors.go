package disk

import (
	"errors"
	"fmt"
)

// Sentinel errors. Test with errors.Is; the typed errors below match them.
var (
	// ErrLocked means another Store (in this process or another) holds the
	// directory. The concrete error is a *LockedError naming the directory.
	ErrLocked = errors.New("kvtier: disk: directory locked")
	// ErrExists means PlanWrite was asked for a hash that is already stored
	// or is being written.
	ErrExists = errors.New("kvtier: disk: block exists")
	// ErrNoSpace means every slot is pinned or being written, so PlanWrite
	// found nothing to evict.
	ErrNoSpace = errors.New("kvtier: disk: no evictable slot")
	// ErrNotFound means ReadSync was asked for a hash the store does not hold.
	ErrNotFound = errors.New("kvtier: disk: block not found")
	// ErrCorrupt means a record failed verification on read. The concrete
	// error is a *CorruptError.
	ErrCorrupt = errors.New("kvtier: disk: corrupt record")
	// ErrDigestMismatch means a read named a digest other than the one the
	// block was stored with: the block is another prefix's (a 64-bit hash
	// collision) or the caller's chain differs from the writer's. Found at
	// plan time it is a plain miss (PlanRead returns it, the block stays);
	// found in the header read back from disk it comes inside a
	// *CorruptError and the block is dropped. Both are counted in
	// Stats.VerifyMismatch.
	ErrDigestMismatch = errors.New("kvtier: disk: digest mismatch")
	// ErrReadCanceled is what a caller passes to CompleteRead for a read
	// it gave up before Execute ran: the slot is unpinned, the block stays,
	// and nothing is counted (neither a read nor a read error).
	ErrReadCanceled = errors.New("kvtier: disk: read canceled before it ran")
	// ErrTooLarge means a payload is longer than Config.PayloadBytes.
	ErrTooLarge = errors.New("kvtier: disk: payload too large")
	// ErrClosed means the Store was closed.
	ErrClosed = errors.New("kvtier: disk: store closed")
	// ErrBusy means Close was called while operations were still planned
	// but not completed; the store stays open.
	ErrBusy = errors.New("kvtier: disk: operations in flight")
	// ErrUnsafeFile means OSFS refused Dir, the LOCK file or a slot file:
	// a symbolic link, the wrong file type, another owner or a hard link
	// (see OSFS). The store touches nothing behind such a name.
	ErrUnsafeFile = errors.New("kvtier: disk: unsafe file")
	// ErrNotDurable means a RemoveOp was completed without running
	// Execute: the removal is not yet on disk.
	ErrNotDurable = errors.New("kvtier: disk: removal not durable")
	// ErrNoFallocate means the file system cannot reserve a file's blocks
	// (fallocate is not supported); the concrete error is a *SparseError.
	ErrNoFallocate = errors.New("kvtier: disk: file system cannot reserve space")
	// ErrInsufficientSpace means Open found a file system that cannot
	// reserve blocks with less free space than the slot files still need:
	// the store refuses the capacity rather than fail writes later.
	ErrInsufficientSpace = errors.New("kvtier: disk: not enough free space for CapacityBytes")
	// ErrInvalidConfig means Open rejected its Config.
	ErrInvalidConfig = errors.New("kvtier: disk: invalid config")
)

// LockedError reports the directory another Store holds. It matches
// ErrLocked under errors.Is.
type LockedError struct {
	Dir string
	Err error // the underlying flock error, if any
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("kvtier: disk: directory %q is locked by another store", e.Dir)
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// Unwrap returns the underlying flock error.
func (e *LockedError) Unwrap() error { return e.Err }

// CorruptError reports a record that failed verification. It matches
// ErrCorrupt under errors.Is, and Err (if set) as well.
type CorruptError struct {
	Hash   uint64 // the hash the caller asked for
	Slot   int    // the slot the record lives in
	Reason string // which check failed, e.g. "payload checksum"
	// Err is a sentinel naming the failed check where one exists:
	// ErrDigestMismatch when the header's digest is not the indexed one.
	Err error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("kvtier: disk: corrupt record for hash %016x in slot %d: %s", e.Hash, e.Slot, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Unwrap returns Err.
func (e *CorruptError) Unwrap() error { return e.Err }

// SparseError reports a file that File.Allocate sized without reserving
// its blocks. It matches ErrNoFallocate under errors.Is.
type SparseError struct {
	Name  string
	Holes int64 // bytes of the file not backed by blocks
	Err   error // the fallocate error, e.g. unix.EOPNOTSUPP
}

func (e *SparseError) Error() string {
	return fmt.Sprintf("kvtier: disk: %q cannot be preallocated (%v): %d bytes are holes", e.Name, e.Err, e.Holes)
}

// Is makes errors.Is(err, ErrNoFallocate) true.
func (e *SparseError) Is(target error) bool { return target == ErrNoFallocate }

// Unwrap returns the fallocate error.
func (e *SparseError) Unwrap() error { return e.Err }
