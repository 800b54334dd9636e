package gpu

import (
	"fmt"
	"sync"
)

// SignalFence is a fence the host signals, on either backend: for an
// engine whose writes to the arena are not work on a CUDA stream (a CPU
// engine writing through Arena.WriteBlock or WriteRegion, a test). On the
// host backend it is a HostFence. On CUDA it also holds a device-side
// event that a private stream records behind a wait on a page-locked flag
// (cuStreamWaitValue32): Signal sets the flag, so copy streams wait for it
// on the device (cuStreamWaitEvent) and no host thread blocks. Each costs a
// stream, an event and a small cuMemAllocHost on CUDA: an engine on the GPU
// records a CUDAFence on its compute stream instead.
//
// A SignalFence belongs to the device it was made for. A stream of that
// device closed while it waits on the fence abandons it: every stream
// waiting on it is released, the batches behind it — on every such stream,
// to the end of the stream's life — fail with ErrFenceAbandoned, and a later
// Signal changes nothing. On CUDA, Device.Close abandons the device's
// unsignalled fences the same way (on the host backend it closes the
// streams, which abandon the fences they wait on).
type SignalFence struct {
	dev       Device
	ch        chan struct{}
	once      sync.Once
	abandoned chan struct{} // closed when a closing stream or device gave up on the fence
	side      fenceSide     // the backend's device-side part; nil on the host backend
}

// fenceSide is a backend's device-side part of a SignalFence.
type fenceSide interface {
	release() // lets the device-side waiters go
}

// NewSignalFence returns an unsignalled fence for streams of d. On CUDA it
// fails with ErrClosed once d is closed; on the host backend a fence holds
// no device resource, and one made for a closed device is simply never
// waited on.
func NewSignalFence(d Device) (*SignalFence, error) {
	if d == nil {
		return nil, fmt.Errorf("%w: no device", ErrBadFence)
	}
	f := &SignalFence{dev: d, ch: make(chan struct{}), abandoned: make(chan struct{})}
	if b, ok := d.(interface {
		newFenceSide(*SignalFence) (fenceSide, error)
	}); ok {
		side, err := b.newFenceSide(f)
		if err != nil {
			return nil, err
		}
		f.side = side
	}
	return f, nil
}

// Signal marks the work before the fence done and releases every stream
// waiting on it. It may be called more than once; after the fence was
// abandoned it does nothing.
func (f *SignalFence) Signal() {
	f.once.Do(func() {
		close(f.ch)
		if f.side != nil {
			f.side.release()
		}
	})
}

// Done implements Fence: closed once Signal was called.
func (f *SignalFence) Done() <-chan struct{} { return f.ch }

// Abandoned reports whether a closing stream or device gave up on the
// fence before it was signalled.
func (f *SignalFence) Abandoned() bool {
	select {
	case <-f.abandoned:
		return true
	default:
		return false
	}
}

// abandon releases the device-side waiters of a fence never signalled and
// marks it abandoned, so the batches behind it fail; it does nothing to a
// signalled fence.
func (f *SignalFence) abandon() {
	f.once.Do(func() {
		close(f.abandoned)
		if f.side != nil {
			f.side.release()
		}
	})
}

// CheckFence reports whether streams of d can wait on f (Device.CheckFence),
// and accepts no fence (nil, or a nil pointer) on every device.
func CheckFence(d Device, f Fence) error {
	if nilFence(f) {
		return nil
	}
	return d.CheckFence(f)
}
