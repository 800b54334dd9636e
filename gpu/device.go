package gpu

import (
	"context"
	"fmt"
)

// Device is one accelerator (or its host stand-in): it owns arenas of
// device memory, the streams that copy between them and host memory, and
// pinned host buffers. Both backends implement it; Default returns the one
// the build selects.
//
// A Device is safe for concurrent use. Close frees everything it
// allocated: arenas (closing their streams first, which drains them) and
// host buffers. Memory obtained from it must not be used after Close.
type Device interface {
	// Name identifies the backend and device, e.g. "host" or "cuda:0".
	Name() string
	// NewArena allocates numBlocks x blockBytes bytes of device memory,
	// zeroed, as opaque block-contiguous blocks. The caller owns the arena
	// and must Free it (or Close the device). A failed allocation returns
	// an error wrapping ErrOutOfMemory.
	NewArena(numBlocks, blockBytes int) (Arena, error)
	// NewKVArena is NewArena for numBlocks blocks of layout.BlockBytes
	// placed by layout.Kind(), so that the arena can address each block's
	// (layer, K or V) regions: RegionOffset, ReadRegion, WriteRegion.
	// Stream copies and ReadBlock/WriteBlock still see each block in its
	// host form whatever the kind.
	NewKVArena(layout Layout, numBlocks int) (Arena, error)
	// NewStream creates an in-order copy stream between arena and host
	// memory. The arena must come from this device. The caller must
	// Close the stream; freeing the arena closes it too.
	NewStream(arena Arena) (Stream, error)
	// AllocHost allocates bytes of page-aligned, zeroed host memory that
	// the device can copy to and from asynchronously. The caller must Free
	// it (or Close the device).
	AllocHost(bytes int) (HostBuffer, error)
	// CheckFence reports whether this device's streams can wait on f, so
	// that a caller can refuse a fence before acting on it: nil for any
	// fence on the host backend; on CUDA, an error wrapping ErrBadFence
	// unless f is a *CUDAFence or *SignalFence made for this device. It is
	// part of the interface so that a wrapper embedding a Device passes it
	// through. Callers use the package function CheckFence, which also
	// accepts no fence (nil, or a nil pointer).
	CheckFence(f Fence) error
	// Close closes every stream, frees every arena and host buffer, and
	// releases the device. Later calls fail with ErrClosed; a second
	// Close returns nil.
	Close() error
}

// Arena is a contiguous range of device memory holding equal blocks. An
// arena from NewArena stores each block contiguously; one from NewKVArena
// places blocks by its Layout's kind. Block offsets in WriteBlock,
// ReadBlock and stream copies are always offsets in the block's host form
// ([layer][kv][token][head][dim]), whatever the kind. An Arena is safe for
// concurrent use, as a Device is; what its bytes hold when two accesses to
// the same bytes overlap (a write and a read or another write) is not
// defined, as for any memory.
type Arena interface {
	NumBlocks() int
	BlockBytes() int
	// Layout returns the layout the arena was made with by NewKVArena;
	// false for an arena from NewArena.
	Layout() (Layout, bool)
	// WriteBlock copies src into block at byte offset off of its host
	// form, synchronously. It fails with ErrOutOfRange unless the whole
	// range lies inside the block, and with ErrClosed after Free. It must
	// not overlap a stream copy of the same block in flight.
	WriteBlock(block, off int, src []byte) error
	// ReadBlock copies from block at byte offset off of its host form into
	// dst, synchronously, with the same checks as WriteBlock.
	ReadBlock(block, off int, dst []byte) error
	// RegionOffset returns the byte offset in the arena's memory of
	// block's (layer, kv) region: Layout.ArenaOffset for this arena. Add
	// it to DevicePtr to hand the region to a kernel. It fails with
	// ErrShape for an arena without a layout and ErrOutOfRange for a
	// region outside the arena.
	RegionOffset(block, layer int, kv KV) (int, error)
	// WriteRegion copies src, (r.End-r.Start) x TokenBytes bytes, into the
	// region r, synchronously, with the same rules as WriteBlock. It
	// fails with ErrShape for an arena without a layout or a src of the
	// wrong size, and with ErrOutOfRange for a region outside the arena.
	WriteRegion(r KVRegion, src []byte) error
	// ReadRegion copies the region r into dst, synchronously, with the
	// same checks as WriteRegion.
	ReadRegion(r KVRegion, dst []byte) error
	// DevicePtr returns the address of the arena's first byte in the
	// device's address space: a CUdeviceptr on CUDA, a host address on the
	// host backend. It stays valid until Free; 0 after.
	DevicePtr() uintptr
	// Free closes the arena's streams (draining them) and releases the
	// memory. A second Free returns nil.
	Free() error
}

// Direction is the way a stream copy goes.
type Direction int

const (
	D2H Direction = iota + 1 // device arena to host memory (offload)
	H2D                      // host memory to device arena (onboard)
)

func (d Direction) String() string {
	switch d {
	case D2H:
		return "d2h"
	case H2D:
		return "h2d"
	}
	return fmt.Sprintf("Direction(%d)", int(d))
}

// CopyOp moves one whole block between the arena and Host. len(Host) must
// equal the arena's BlockBytes, and Host must lie inside a live buffer from
// the same device's AllocHost (ErrNotPinned otherwise). Host holds the
// block in its host form: under a LayerSeparate layout a D2H gathers the
// block's 2 x Layers regions into it and an H2D scatters them back. The caller keeps Host alive and does not
// touch it until the batch's Event is done.
type CopyOp struct {
	Block int
	Host  []byte
}

// Stream runs batches of block copies asynchronously and in order: a batch
// starts after every batch enqueued before it on the same stream has
// finished, and events complete in enqueue order. Different streams are
// not ordered with respect to each other. A Stream is safe for concurrent
// use.
type Stream interface {
	// CopyD2H enqueues copies from arena blocks into host memory. The
	// batch is validated first: a bad op rejects it whole with a
	// *CopyError (ErrBadCopy) and nothing is enqueued. The ops slice is
	// not retained; the Host slices are, until the event is done.
	CopyD2H(ops []CopyOp) (*Event, error)
	// CopyH2D enqueues copies from host memory into arena blocks, with the
	// same rules as CopyD2H.
	CopyH2D(ops []CopyOp) (*Event, error)
	// WaitFence makes every batch enqueued after the call start only once
	// f is done; batches enqueued before are not affected. It fails with
	// ErrBadFence for a nil fence (and on CUDA for a fence that is not a
	// *CUDAFence) and ErrClosed on a closed stream. A fence that is never
	// signalled holds the stream until Close, whose waiting batches then
	// fail with ErrFenceAbandoned.
	WaitFence(f Fence) error
	// Synchronize waits until every batch enqueued before the call has
	// completed, or ctx ends (returning ctx.Err()). Batch failures are
	// reported by their events, not here.
	Synchronize(ctx context.Context) error
	// Close stops accepting batches (they fail with ErrClosed), waits for
	// every enqueued batch to complete, and stops the stream. A second
	// Close returns nil. Close must not be called from a fault hook.
	Close() error
}

// HostBuffer is page-aligned host memory from Device.AllocHost.
type HostBuffer interface {
	// Bytes returns the buffer; nil after Free.
	Bytes() []byte
	// Pinned reports whether the memory is page-locked (cuMemAllocHost on
	// CUDA; a successful mlock on the host backend, which may be refused
	// by RLIMIT_MEMLOCK).
	Pinned() bool
	// Free releases the memory. Using Bytes after Free is a bug; freeing
	// twice panics.
	Free() error
}

// validateOps checks a batch against an arena's geometry and returns a
// *CopyError for the first bad op.
func validateOps(ops []CopyOp, numBlocks, blockBytes int) error {
	for i, op := range ops {
		if op.Block < 0 || op.Block >= numBlocks {
			return &CopyError{Index: i, Block: op.Block,
				Reason: fmt.Sprintf("block outside [0,%d)", numBlocks)}
		}
		if len(op.Host) != blockBytes {
			return &CopyError{Index: i, Block: op.Block,
				Reason: fmt.Sprintf("host buffer is %d bytes, block is %d", len(op.Host), blockBytes)}
		}
	}
	return nil
}

// checkRange checks a synchronous access of n bytes at off inside a block.
func checkRange(block, off, n, numBlocks, blockBytes int) error {
	if block < 0 || block >= numBlocks {
		return fmt.Errorf("%w: block %d outside [0,%d)", ErrOutOfRange, block, numBlocks)
	}
	if off < 0 || off > blockBytes || n > blockBytes-off {
		return fmt.Errorf("%w: bytes [%d,%d) outside block of %d", ErrOutOfRange, off, off+n, blockBytes)
	}
	return nil
}

// checkArenaSize validates NewArena's arguments and returns the total.
func checkArenaSize(numBlocks, blockBytes int) (int, error) {
	if numBlocks <= 0 || blockBytes <= 0 {
		return 0, fmt.Errorf("%w: arena of %d blocks of %d bytes", ErrInvalidSize, numBlocks, blockBytes)
	}
	total, ok := mulAll(numBlocks, blockBytes)
	if !ok {
		return 0, fmt.Errorf("%w: arena of %d blocks of %d bytes overflows", ErrInvalidSize, numBlocks, blockBytes)
	}
	return total, nil
}

// RegionPtr returns the device address of block's (layer, kv) region of a:
// a.DevicePtr() + a.RegionOffset(block, layer, kv).
func RegionPtr(a Arena, block, layer int, kv KV) (uintptr, error) {
	off, err := a.RegionOffset(block, layer, kv)
	if err != nil {
		return 0, err
	}
	base := a.DevicePtr()
	if base == 0 {
		return 0, ErrClosed
	}
	return base + uintptr(off), nil
}
