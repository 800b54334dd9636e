package gpu

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"unsafe"
)

// hostRanges is the set of address ranges of a device's live AllocHost
// buffers: the only host memory its streams accept. The CUDA driver can
// copy asynchronously only from page-locked memory it allocated, so the
// CUDA backend must refuse anything else; the host backend keeps the same
// registry and refuses the same copies, so a caller that hands a stream
// Go memory (or a pool not allocated by the device) fails its tests
// without a GPU. Ranges are kept sorted, so a lookup is a binary search;
// it is safe for concurrent use.
type hostRanges struct {
	mu    sync.RWMutex
	spans []span // sorted by lo; buffers never overlap
}

type span struct{ lo, hi uintptr }

func spanOf(b []byte) span {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return span{lo, lo + uintptr(len(b))}
}

// add registers a live buffer.
func (r *hostRanges) add(mem []byte) {
	s := spanOf(mem)
	r.mu.Lock()
	defer r.mu.Unlock()
	i, _ := slices.BinarySearchFunc(r.spans, s.lo, byLo)
	r.spans = slices.Insert(r.spans, i, s)
}

// remove unregisters a buffer before its memory is released.
func (r *hostRanges) remove(mem []byte) {
	s := spanOf(mem)
	r.mu.Lock()
	defer r.mu.Unlock()
	i, ok := slices.BinarySearchFunc(r.spans, s.lo, byLo)
	if ok {
		r.spans = slices.Delete(r.spans, i, i+1)
	}
}

// contains reports whether b lies wholly inside one registered buffer.
func (r *hostRanges) contains(b []byte) bool {
	s := spanOf(b)
	r.mu.RLock()
	defer r.mu.RUnlock()
	// The last buffer starting at or before s.lo is the only candidate.
	i, ok := slices.BinarySearchFunc(r.spans, s.lo, byLo)
	if !ok {
		i--
	}
	return i >= 0 && s.lo >= r.spans[i].lo && s.hi <= r.spans[i].hi
}

// checkOps returns an error wrapping ErrNotPinned and a *CopyError for the
// first op whose host memory is not inside a registered buffer.
func (r *hostRanges) checkOps(ops []CopyOp) error {
	for i, op := range ops {
		if !r.contains(op.Host) {
			return fmt.Errorf("%w: %w", ErrNotPinned,
				&CopyError{Index: i, Block: op.Block, Reason: "host memory not from this device's AllocHost"})
		}
	}
	return nil
}

func byLo(e span, lo uintptr) int { return cmp.Compare(e.lo, lo) }
