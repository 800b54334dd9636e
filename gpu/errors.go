package gpu

import (
	"errors"
	"fmt"
)

// Sentinel errors. Callers branch on them with errors.Is; the returned
// errors wrap them with detail.
var (
	// ErrInvalidSpec: a ModelSpec, block size or dtype name is not valid.
	// The detail is a *SpecError per offending field.
	ErrInvalidSpec = errors.New("kvtier: invalid model spec")
	// ErrShape: a tensor view was given a shape, stride list or index
	// list that does not fit its rank, or a dimension that does not exist.
	ErrShape = errors.New("kvtier: bad shape")
	// ErrOutOfRange: an index, slice bound, block number or byte range
	// lies outside the storage it addresses.
	ErrOutOfRange = errors.New("kvtier: out of range")
	// ErrInvalidSize: a zero, negative or overflowing allocation size.
	ErrInvalidSize = errors.New("kvtier: invalid size")
	// ErrBadCopy: a copy batch was rejected before anything was enqueued.
	// The detail is a *CopyError naming the first bad op.
	ErrBadCopy = errors.New("kvtier: bad copy batch")
	// ErrNotPinned: a stream was asked to copy to or from host memory
	// that does not lie inside a live buffer from the same device's
	// AllocHost. Both backends enforce it: the CUDA driver can only copy
	// asynchronously from page-locked memory it allocated, and the host
	// backend checks the same rule so that tests catch wrong wiring.
	ErrNotPinned = errors.New("kvtier: host memory is not pinned")
	// ErrOutOfMemory: an arena or host buffer could not be allocated
	// (mmap or cuMemAlloc refused it, or it is larger than the machine's
	// memory). The detail says what was being allocated and how many
	// bytes. Nothing was allocated; the process carries on.
	ErrOutOfMemory = errors.New("kvtier: out of memory")
	// ErrClosed: the device, arena or stream has been closed or freed.
	ErrClosed = errors.New("kvtier: closed")
	// ErrNotDone: Event.Err was called before the event completed.
	ErrNotDone = errors.New("kvtier: event not done")
)

// SpecError names one invalid field of a ModelSpec or layout request.
type SpecError struct {
	Field  string // "Layers", "KVHeads", "HeadDim", "DType", "BlockTokens"
	Value  int
	Reason string
}

func (e *SpecError) Error() string {
	return fmt.Sprintf("kvtier: invalid %s %d: %s", e.Field, e.Value, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidSpec) hold.
func (e *SpecError) Unwrap() error { return ErrInvalidSpec }

// CopyError describes why a copy batch was rejected. Nothing of the batch
// was enqueued.
type CopyError struct {
	Index  int // position of the first bad op in the batch
	Block  int // its block number
	Reason string
}

func (e *CopyError) Error() string {
	return fmt.Sprintf("kvtier: bad copy op %d (block %d): %s", e.Index, e.Block, e.Reason)
}

// Unwrap makes errors.Is(err, ErrBadCopy) hold.
func (e *CopyError) Unwrap() error { return ErrBadCopy }
