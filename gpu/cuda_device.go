//go:build cuda

package gpu

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"gorgonia.org/cu"
)

// CUDAConfig selects the GPU of the CUDA backend.
type CUDAConfig struct {
	Ordinal int // CUDA device number; 0 is the first GPU
}

// NewCUDA returns a Device on GPU cfg.Ordinal, using its primary context
// (shared with any CUDA runtime user in the process). Arenas are
// cuMemAlloc memory, host buffers cuMemAllocHost (page-locked, zeroed
// here), and each stream is a non-blocking CUstream on which a batch
// enqueues one cuMemcpy*Async per block and records an event; one
// goroutine per stream waits on those events in order and completes the
// batches' Events.
//
// CopyOp.Host must lie inside a buffer from this device's AllocHost: the
// copies run after the call returns, so Go memory may not be handed to
// the driver. Other memory is rejected with ErrNotPinned.
func NewCUDA(cfg CUDAConfig) (Device, error) {
	if cfg.Ordinal < 0 {
		return nil, fmt.Errorf("%w: CUDA ordinal %d", ErrInvalidSize, cfg.Ordinal)
	}
	dev, err := cu.GetDevice(cfg.Ordinal)
	if err != nil {
		return nil, fmt.Errorf("kvtier: cuDeviceGet(%d): %w", cfg.Ordinal, err)
	}
	ctx, err := dev.RetainPrimaryCtx()
	if err != nil {
		return nil, fmt.Errorf("kvtier: cuDevicePrimaryCtxRetain(%d): %w", cfg.Ordinal, err)
	}
	maxPitch, err := dev.Attribute(cu.MaxPitch)
	if err != nil {
		_ = dev.ReleasePrimaryCtx()
		return nil, fmt.Errorf("kvtier: cuDeviceGetAttribute(MAX_PITCH): %w", err)
	}
	return &cudaDevice{
		dev:      dev,
		ctx:      ctx,
		name:     fmt.Sprintf("cuda:%d", cfg.Ordinal),
		maxPitch: int64(maxPitch),
		arenas:   make(map[*cudaArena]struct{}),
		bufs:     make(map[*cudaBuffer]struct{}),
		signals:  make(map[*cudaSignal]struct{}),
	}, nil
}

type cudaDevice struct {
	dev      cu.Device
	ctx      cu.CUContext
	name     string
	maxPitch int64 // CU_DEVICE_ATTRIBUTE_MAX_PITCH: the widest pitch of a 2D copy

	mu     sync.Mutex
	closed bool
	arenas map[*cudaArena]struct{}
	bufs   map[*cudaBuffer]struct{}
	pinned hostRanges // the live bufs' memory: what streams may copy with

	signals map[*cudaSignal]struct{} // SignalFences' device sides not yet freed
	sigWG   sync.WaitGroup           // one per device side until it is freed
}

// do runs f on a locked OS thread with the device's context current: the
// driver API binds contexts to threads, goroutines move between them.
func (d *cudaDevice) do(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cu.SetCurrentContext(d.ctx); err != nil {
		return fmt.Errorf("kvtier: cuCtxSetCurrent: %w", err)
	}
	return f()
}

func (d *cudaDevice) Name() string { return d.name }

func (d *cudaDevice) NewArena(numBlocks, blockBytes int) (Arena, error) {
	g, total, err := newGeom(numBlocks, blockBytes)
	if err != nil {
		return nil, err
	}
	return d.newArena(g, total)
}

func (d *cudaDevice) NewKVArena(l Layout, numBlocks int) (Arena, error) {
	g, total, err := newKVGeom(l, numBlocks)
	if err != nil {
		return nil, err
	}
	return d.newArena(g, total)
}

func (d *cudaDevice) newArena(g geom, total int) (Arena, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	a := &cudaArena{geom: g, dev: d, streams: make(map[*cudaStream]struct{}), unmapped: make(chan struct{})}
	err := d.do(func() error {
		var err error
		if a.ptr, err = cu.MemAlloc(int64(total)); err != nil {
			if errors.Is(err, cu.OutOfMemory) {
				return fmt.Errorf("%w: device arena of %d blocks x %d bytes: cuMemAlloc(%d): %w",
					ErrOutOfMemory, g.numBlocks, g.blockBytes, total, err)
			}
			return fmt.Errorf("kvtier: cuMemAlloc(%d): %w", total, err)
		}
		if err := cu.MemsetD8(a.ptr, 0, int64(total)); err != nil {
			_ = cu.MemFree(a.ptr)
			return fmt.Errorf("kvtier: cuMemsetD8: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	d.arenas[a] = struct{}{}
	return a, nil
}

func (d *cudaDevice) NewStream(arena Arena) (Stream, error) {
	a, ok := arena.(*cudaArena)
	if !ok || a.dev != d {
		return nil, fmt.Errorf("kvtier: arena %T does not belong to %s", arena, d.name)
	}
	s := &cudaStream{arena: a}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.freed.Load() {
		return nil, ErrClosed
	}
	err := d.do(func() (err error) {
		s.s, err = cu.MakeStream(cu.NonBlocking)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kvtier: cuStreamCreate: %w", err)
	}
	s.q = newFIFO(s.wait)
	a.streams[s] = struct{}{}
	return s, nil
}

func (d *cudaDevice) AllocHost(n int) (HostBuffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: host buffer of %d bytes", ErrInvalidSize, n)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	var p unsafe.Pointer
	err := d.do(func() (err error) {
		p, err = cuMemAllocHost(n)
		return err
	})
	if err != nil {
		return nil, err
	}
	mem := unsafe.Slice((*byte)(p), n)
	clear(mem) // cuMemAllocHost does not zero
	b := &cudaBuffer{dev: d, mem: mem}
	d.bufs[b] = struct{}{}
	d.pinned.add(mem)
	return b, nil
}

func (d *cudaDevice) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	arenas, bufs, signals := d.arenas, d.bufs, d.signals
	d.arenas, d.bufs, d.signals = nil, nil, nil
	d.mu.Unlock()

	// Fences never signalled would hold the streams' drains forever:
	// abandon them, and wait until every fence's resources are freed.
	for c := range signals {
		c.f.abandon()
	}
	d.sigWG.Wait()
	var errs []error
	for a := range arenas {
		errs = append(errs, a.free())
	}
	for b := range bufs {
		errs = append(errs, b.release(true /* byDevice */))
	}
	if err := d.dev.ReleasePrimaryCtx(); err != nil {
		errs = append(errs, fmt.Errorf("kvtier: cuDevicePrimaryCtxRelease: %w", err))
	}
	return errors.Join(errs...)
}

type cudaArena struct {
	geom
	dev *cudaDevice
	ptr cu.DevicePtr

	freed   atomic.Bool
	mu      sync.Mutex
	streams map[*cudaStream]struct{}
	// unmapped is closed once free has closed the streams and freed the
	// memory: a second free (Device.Close racing Arena.Free) waits for it.
	unmapped chan struct{}
}

// at returns the device address of byte off of the arena.
func (a *cudaArena) at(off int) cu.DevicePtr { return a.ptr + cu.DevicePtr(off) }

func (a *cudaArena) DevicePtr() uintptr {
	if a.freed.Load() {
		return 0
	}
	return uintptr(a.ptr)
}

func (a *cudaArena) WriteBlock(block, off int, src []byte) error {
	return a.inBlock(block, off, src, a.write)
}

func (a *cudaArena) ReadBlock(block, off int, dst []byte) error {
	return a.inBlock(block, off, dst, a.read)
}

func (a *cudaArena) WriteRegion(r KVRegion, src []byte) error { return a.inRegion(r, src, a.write) }

func (a *cudaArena) ReadRegion(r KVRegion, dst []byte) error { return a.inRegion(r, dst, a.read) }

// write copies src to a checked range of block's host form, synchronously:
// the driver is done with src when it returns.
func (a *cudaArena) write(block, off int, src []byte) error {
	if a.freed.Load() {
		return ErrClosed
	}
	if len(src) == 0 {
		return nil
	}
	return a.dev.do(func() error {
		var err error
		a.pieces(block, off, len(src), func(ao, bo, n int) {
			if err == nil {
				err = cu.MemcpyHtoD(a.at(ao), unsafe.Pointer(&src[bo-off]), int64(n))
			}
		})
		if err == nil {
			// From pageable memory cuMemcpyHtoD may return once the bytes
			// are staged, before the DMA (on the legacy stream) lands: wait
			// for it, so a copy a SignalFence releases reads what was written.
			err = cu.NoStream.Synchronize()
		}
		return err
	})
}

// read copies a checked range of block's host form into dst, synchronously.
func (a *cudaArena) read(block, off int, dst []byte) error {
	if a.freed.Load() {
		return ErrClosed
	}
	if len(dst) == 0 {
		return nil
	}
	return a.dev.do(func() error {
		var err error
		a.pieces(block, off, len(dst), func(ao, bo, n int) {
			if err == nil {
				err = cu.MemcpyDtoH(unsafe.Pointer(&dst[bo-off]), a.at(ao), int64(n))
			}
		})
		return err
	})
}

// Free frees the arena, and only then leaves the device's set: a
// Device.Close meanwhile finds it there and waits for its streams to drain
// before it frees the host buffers and the context their copies use.
func (a *cudaArena) Free() error {
	err := a.free()
	a.dev.mu.Lock()
	delete(a.dev.arenas, a)
	a.dev.mu.Unlock()
	return err
}

// free closes the streams and frees the memory; a second call waits for the
// first to finish.
func (a *cudaArena) free() error {
	a.mu.Lock()
	if a.freed.Swap(true) {
		a.mu.Unlock()
		<-a.unmapped
		return nil
	}
	defer close(a.unmapped)
	streams := a.streams
	a.streams = nil
	a.mu.Unlock()
	var errs []error
	for s := range streams {
		errs = append(errs, s.close())
	}
	errs = append(errs, a.dev.do(func() error { return cu.MemFree(a.ptr) }))
	return errors.Join(errs...)
}

// cudaPending is a batch enqueued on the GPU: the stream's waiter
// synchronizes ev (when recorded) and then completes done with err joined
// to anything the wait reports.
type cudaPending struct {
	ev       cu.Event
	recorded bool
	err      error // failure while enqueueing
	done     *Event
	behind   []*SignalFence // unsignalled when the batch was enqueued: if one is abandoned, the batch fails
}

type cudaStream struct {
	arena *cudaArena
	s     cu.Stream
	q     *fifo[cudaPending]

	enqMu  sync.Mutex // keeps GPU order and completion order identical
	closed bool
	behind []*SignalFence // waited on and not yet signalled; under enqMu
}

func (s *cudaStream) CopyD2H(ops []CopyOp) (*Event, error) { return s.enqueue(D2H, ops) }
func (s *cudaStream) CopyH2D(ops []CopyOp) (*Event, error) { return s.enqueue(H2D, ops) }

func (s *cudaStream) enqueue(dir Direction, ops []CopyOp) (*Event, error) {
	a, d := s.arena, s.arena.dev
	if err := validateOps(ops, a.numBlocks, a.blockBytes); err != nil {
		return nil, err
	}
	s.enqMu.Lock()
	defer s.enqMu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if err := d.pinned.checkOps(ops); err != nil {
		return nil, err
	}
	live := s.behind[:0]
	for _, f := range s.behind {
		if !fenceDone(f) {
			live = append(live, f)
		}
	}
	s.behind = live
	p := cudaPending{done: newEvent(), behind: slices.Clone(live)}
	p.err = d.do(func() error {
		for i, op := range ops {
			if err := s.copyBlock(dir, op); err != nil {
				return fmt.Errorf("kvtier: %v copy %d of %d (block %d): %w", dir, i, len(ops), op.Block, err)
			}
		}
		return nil
	})
	// Record an event even after a failed enqueue, so the batch completes
	// only once the copies that did get enqueued are finished.
	rerr := d.do(func() error {
		ev, err := cu.MakeEvent(cu.DisableTiming | cu.BlockingSyncEvent)
		if err != nil {
			return fmt.Errorf("kvtier: cuEventCreate: %w", err)
		}
		if err := ev.Record(s.s); err != nil {
			_ = cu.DestroyEvent(&ev)
			return fmt.Errorf("kvtier: cuEventRecord: %w", err)
		}
		p.ev, p.recorded = ev, true
		return nil
	})
	if rerr != nil {
		// No event to wait on: wait for the stream itself, here.
		serr := d.do(s.s.Synchronize)
		p.err = errors.Join(p.err, rerr, serr)
	}
	if err := s.q.push(p, p.done); err != nil {
		panic("kvtier: CUDA stream queue closed while the stream is open")
	}
	return p.done, nil
}

// copyBlock enqueues one block's copy on the stream; the device's context
// must be current. A block-contiguous block is one cuMemcpy*Async. A
// layer-separate block is nseg segments of segBytes, numBlocks*segBytes
// apart in the arena and packed in the host buffer: one cuMemcpy2DAsync
// with those pitches gathers or scatters them all, or, when the arena's
// pitch exceeds the device's limit, one cuMemcpy*Async per segment.
func (s *cudaStream) copyBlock(dir Direction, op CopyOp) error {
	a := s.arena
	host := unsafe.Pointer(unsafe.SliceData(op.Host))
	dev := a.at(op.Block * a.segBytes)
	seg, pitch := int64(a.segBytes), int64(a.numBlocks)*int64(a.segBytes)
	switch {
	case a.nseg == 1:
		if dir == D2H {
			return cu.MemcpyDtoHAsync(host, dev, seg, s.s)
		}
		return cu.MemcpyHtoDAsync(dev, host, seg, s.s)
	case pitch <= a.dev.maxPitch:
		return memcpy2DAsync(dir, dev, pitch, host, seg, int64(a.nseg), s.s)
	}
	for i := range a.nseg {
		h := unsafe.Add(host, i*a.segBytes)
		d := dev + cu.DevicePtr(int64(i)*pitch)
		var err error
		if dir == D2H {
			err = cu.MemcpyDtoHAsync(h, d, seg, s.s)
		} else {
			err = cu.MemcpyHtoDAsync(d, h, seg, s.s)
		}
		if err != nil {
			return fmt.Errorf("segment %d of %d: %w", i, a.nseg, err)
		}
	}
	return nil
}

// wait runs on the stream's goroutine, in enqueue order.
func (s *cudaStream) wait(p cudaPending) {
	err := p.err
	if p.recorded {
		werr := s.arena.dev.do(func() error {
			err := p.ev.Synchronize()
			if derr := cu.DestroyEvent(&p.ev); err == nil && derr != nil {
				err = derr
			}
			return err
		})
		if werr != nil {
			err = errors.Join(err, fmt.Errorf("kvtier: cuEventSynchronize: %w", werr))
		}
	}
	for _, f := range p.behind {
		if f.Abandoned() {
			err = errors.Join(err, ErrFenceAbandoned)
			break
		}
	}
	p.done.complete(err)
}

func (s *cudaStream) Synchronize(ctx context.Context) error {
	ev := s.q.lastEvent()
	if ev == nil {
		return nil
	}
	select {
	case <-ev.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *cudaStream) Close() error {
	err := s.close()
	s.arena.mu.Lock()
	delete(s.arena.streams, s)
	s.arena.mu.Unlock()
	return err
}

// close drains the stream and destroys the CUstream; idempotent.
func (s *cudaStream) close() error {
	s.enqMu.Lock()
	if s.closed {
		s.enqMu.Unlock()
		return nil
	}
	s.closed = true
	behind := s.behind
	s.behind = nil
	s.enqMu.Unlock()
	for _, f := range behind {
		f.abandon() // releases the device's wait, and fails the batches behind it
	}
	s.q.close()
	return s.arena.dev.do(func() error {
		if err := s.s.Destroy(); err != nil {
			return fmt.Errorf("kvtier: cuStreamDestroy: %w", err)
		}
		return nil
	})
}

type cudaBuffer struct {
	dev   *cudaDevice
	mu    sync.Mutex
	mem   []byte
	state bufState
}

func (b *cudaBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mem
}

// Pinned is always true: cuMemAllocHost memory is page-locked.
func (b *cudaBuffer) Pinned() bool { return true }

func (b *cudaBuffer) Free() error {
	b.dev.mu.Lock()
	delete(b.dev.bufs, b)
	b.dev.mu.Unlock()
	return b.release(false /* byDevice */)
}

func (b *cudaBuffer) release(byDevice bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.state == bufFreed && byDevice:
		return nil // its owner freed it while Device.Close ran
	case b.state == bufFreed:
		panic("kvtier: host buffer freed twice")
	case b.state == bufReleased:
		return nil
	}
	b.state = bufFreed
	if byDevice {
		b.state = bufReleased
	}
	p := unsafe.Pointer(unsafe.SliceData(b.mem))
	b.dev.pinned.remove(b.mem)
	b.mem = nil
	return b.dev.do(func() error {
		if err := cu.MemFreeHost(p); err != nil {
			return fmt.Errorf("kvtier: cuMemFreeHost: %w", err)
		}
		return nil
	})
}

// CUDAFence is a Fence over a CUDA event the engine recorded
// (cuEventRecord) on its compute stream, in the device's context (the
// primary context, which the CUDA runtime shares). A copy stream waits for
// it on the device with cuStreamWaitEvent. The event must be recorded
// before the fence is handed over: CUDA treats a never-recorded event as
// complete. The engine keeps the event alive until Done is closed.
type CUDAFence struct {
	dev  *cudaDevice
	ev   cu.Event
	once sync.Once
	ch   chan struct{}
}

// NewCUDAFence wraps ev, recorded on the engine's stream, for streams of
// dev. It fails with ErrBadFence when dev is not a CUDA device.
func NewCUDAFence(dev Device, ev cu.Event) (*CUDAFence, error) {
	d, ok := dev.(*cudaDevice)
	if !ok {
		return nil, fmt.Errorf("%w: %T is not a CUDA device", ErrBadFence, dev)
	}
	return &CUDAFence{dev: d, ev: ev, ch: make(chan struct{})}, nil
}

// Done implements Fence. The first call starts a goroutine that waits for
// the event on the host (cuEventSynchronize); streams never need it.
func (f *CUDAFence) Done() <-chan struct{} {
	f.once.Do(func() {
		go func() {
			_ = f.dev.do(f.ev.Synchronize) // an error means the context is gone: nothing left to wait for
			close(f.ch)
		}()
	})
	return f.ch
}

// WaitFence makes the CUstream wait on the device for the fence's event:
// a CUDAFence's (the engine's) or a SignalFence's.
func (s *cudaStream) WaitFence(f Fence) error {
	if nilFence(f) {
		return fmt.Errorf("%w: nil fence", ErrBadFence)
	}
	if err := s.arena.dev.CheckFence(f); err != nil {
		return err
	}
	s.enqMu.Lock()
	defer s.enqMu.Unlock()
	if s.closed {
		return ErrClosed
	}
	switch f := f.(type) {
	case *SignalFence:
		return s.waitSignal(f)
	case *CUDAFence:
		return s.waitEvent(f.ev)
	}
	return nil
}

// waitSignal makes the stream wait for a SignalFence; under enqMu.
func (s *cudaStream) waitSignal(f *SignalFence) error {
	if f.Abandoned() {
		return ErrFenceAbandoned
	}
	if fenceDone(f) {
		return nil
	}
	c := f.side.(*cudaSignal)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.destroyed { // else the flag is set: nothing to wait for
		if err := s.waitEvent(c.ev); err != nil {
			return err
		}
	}
	s.behind = append(s.behind, f)
	return nil
}

func (s *cudaStream) waitEvent(ev cu.Event) error {
	return s.arena.dev.do(func() error {
		if err := s.s.Wait(ev, 0); err != nil {
			return fmt.Errorf("kvtier: cuStreamWaitEvent: %w", err)
		}
		return nil
	})
}
