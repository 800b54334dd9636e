//go:build cuda

package gpu

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"gorgonia.org/cu"
)

// cudaSignal is a SignalFence's device side: a page-locked flag, a private
// stream that waits for it, and an event recorded behind the wait.
type cudaSignal struct {
	dev  *cudaDevice
	f    *SignalFence
	flag unsafe.Pointer // 4 bytes of cuMemAllocHost memory
	s    cu.Stream
	ev   cu.Event

	mu        sync.Mutex // orders streams' waits on ev before its destruction
	destroyed bool
}

func (d *cudaDevice) newFenceSide(f *SignalFence) (fenceSide, error) {
	c := &cudaSignal{dev: d, f: f}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	var made []func() // undo steps, run on failure
	err := d.do(func() error {
		p, err := cuMemAllocHost(4)
		if err != nil {
			return err
		}
		made = append(made, func() { _ = cu.MemFreeHost(p) })
		c.flag = p
		atomic.StoreUint32((*uint32)(p), 0)
		if c.s, err = cu.MakeStream(cu.NonBlocking); err != nil {
			return fmt.Errorf("kvtier: cuStreamCreate: %w", err)
		}
		made = append(made, func() { _ = c.s.Destroy() })
		if err := streamWaitFlag(c.s, p); err != nil {
			return err
		}
		made = append(made, func() { atomic.StoreUint32((*uint32)(p), 1); _ = c.s.Synchronize() })
		if c.ev, err = cu.MakeEvent(cu.DisableTiming); err != nil {
			return fmt.Errorf("kvtier: cuEventCreate: %w", err)
		}
		made = append(made, func() { _ = cu.DestroyEvent(&c.ev) })
		if err := c.ev.Record(c.s); err != nil {
			return fmt.Errorf("kvtier: cuEventRecord: %w", err)
		}
		return nil
	})
	if err != nil {
		_ = d.do(func() error {
			for i := len(made) - 1; i >= 0; i-- {
				made[i]()
			}
			return nil
		})
		return nil, err
	}
	d.signals[c] = struct{}{}
	d.sigWG.Add(1)
	return c, nil
}

// release sets the flag, then frees the fence's resources once the device
// has passed it.
func (c *cudaSignal) release() {
	atomic.StoreUint32((*uint32)(c.flag), 1)
	go func() {
		defer c.dev.sigWG.Done()
		_ = c.dev.do(c.ev.Synchronize) // an error means the context is gone, and its resources with it
		c.mu.Lock()
		c.destroyed = true
		_ = c.dev.do(func() error {
			return errors.Join(cu.DestroyEvent(&c.ev), c.s.Destroy(), cu.MemFreeHost(c.flag))
		})
		c.mu.Unlock()
		c.dev.mu.Lock()
		delete(c.dev.signals, c)
		c.dev.mu.Unlock()
	}()
}

// CheckFence implements Device: it accepts the fences a stream of d can
// wait on the device for.
func (d *cudaDevice) CheckFence(f Fence) error {
	switch f := f.(type) {
	case *CUDAFence:
		if f.dev != d {
			return fmt.Errorf("%w: the CUDA fence belongs to another device", ErrBadFence)
		}
	case *SignalFence:
		if f.dev != Device(d) {
			return fmt.Errorf("%w: the signal fence was made for another device", ErrBadFence)
		}
	default:
		return fmt.Errorf("%w: a CUDA stream waits on a *gpu.CUDAFence or *gpu.SignalFence, not %T", ErrBadFence, f)
	}
	return nil
}
