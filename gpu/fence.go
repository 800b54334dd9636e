package gpu

import (
	"errors"
	"reflect"
	"sync"
)

// Fence marks a point in the engine's own work, typically the end of the
// forward pass that computes a batch of blocks. A Stream told to wait on a
// fence (WaitFence) starts no later batch before the fence is done, so an
// offload that reads blocks the engine is still writing copies the finished
// KV, not what the blocks held before.
//
// On the host backend any Fence works: the stream's worker waits for Done.
// An engine computing on the CPU uses a HostFence (or a SignalFence) and
// signals it when its writes are finished. On the CUDA backend the fence
// must be a *CUDAFence, an event the engine recorded on its compute stream,
// or a *SignalFence made for the device: the copy stream waits for it on
// the device (cuStreamWaitEvent) and no host thread blocks. CheckFence says
// ahead of time whether a device's streams can wait on a fence.
type Fence interface {
	// Done returns a channel closed once the work before the fence is
	// complete.
	Done() <-chan struct{}
}

var (
	// ErrBadFence: WaitFence was given a nil fence, or on CUDA a fence
	// that is neither a *CUDAFence nor a *SignalFence of the device.
	ErrBadFence = errors.New("kvtier: bad fence")
	// ErrFenceAbandoned: the stream was closed while it waited on a fence
	// that was never signalled. The batches behind the fence fail with it
	// (nothing is copied), so no copy reads KV the engine never finished.
	ErrFenceAbandoned = errors.New("kvtier: stream closed while waiting on a fence")
)

// HostFence is a Fence the engine signals itself when its writes to the
// arena are done. The zero value is not usable; use NewHostFence. It is
// safe for concurrent use; Signal may be called more than once.
type HostFence struct {
	once sync.Once
	ch   chan struct{}
}

// NewHostFence returns an unsignalled fence.
func NewHostFence() *HostFence { return &HostFence{ch: make(chan struct{})} }

// Signal marks the fence done and releases every stream waiting on it.
func (f *HostFence) Signal() { f.once.Do(func() { close(f.ch) }) }

// Done implements Fence.
func (f *HostFence) Done() <-chan struct{} { return f.ch }

// fenceDone reports, without blocking, whether f is done.
func fenceDone(f Fence) bool {
	select {
	case <-f.Done():
		return true
	default:
		return false
	}
}

// FenceDone reports, without blocking, whether f is done; a nil fence, or
// a nil pointer of a fence type, is done.
func FenceDone(f Fence) bool { return nilFence(f) || fenceDone(f) }

// nilFence reports whether f is nil or a nil pointer in a Fence: a
// (*HostFence)(nil) passed where a Fence goes is no fence, not a crash.
func nilFence(f Fence) bool {
	if f == nil {
		return true
	}
	v := reflect.ValueOf(f)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
