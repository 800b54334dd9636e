package gpu

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// HostConfig configures the host backend. The zero value is a device with
// unlimited bandwidth and no faults.
type HostConfig struct {
	// BandwidthBytesPerSec, when positive, models a PCIe link: each
	// direction is a link of this bandwidth shared by all the device's
	// streams, and a batch of N bytes completes no sooner than N/bw after
	// the link became free for it. 0 means unlimited.
	BandwidthBytesPerSec int64
	// Clock drives the bandwidth model; nil means the wall clock.
	Clock Clock
	// Fault, when set, is called by a stream's worker before it copies a
	// batch. It may block (to slow a copy) or return an error, which fails
	// the batch (nothing of it is copied) and is wrapped in its Event.Err.
	// It must not retain or modify ops and must not call Stream.Close.
	Fault func(dir Direction, ops []CopyOp) error
}

// NewHost returns a Device whose "device memory" is ordinary host memory
// and whose streams are goroutines doing real memory copies in order. Like
// the CUDA backend, its streams accept only host memory inside a live
// buffer from its own AllocHost and reject anything else with
// ErrNotPinned, so code that works here keeps working on a GPU. It
// stands in for a GPU in tests, in benchmarks of the transfer path, and
// on machines without one. cfg is copied, never modified.
func NewHost(cfg HostConfig) (Device, error) {
	if cfg.BandwidthBytesPerSec < 0 {
		return nil, fmt.Errorf("%w: bandwidth %d bytes/s", ErrInvalidSize, cfg.BandwidthBytesPerSec)
	}
	d := &hostDevice{
		fault:  cfg.Fault,
		arenas: make(map[*hostArena]struct{}),
		bufs:   make(map[*hostBuffer]struct{}),
	}
	if cfg.BandwidthBytesPerSec > 0 {
		clock := cfg.Clock
		if clock == nil {
			clock = realClock{}
		}
		d.pacer = &pacer{clock: clock, bw: uint64(cfg.BandwidthBytesPerSec)}
	}
	return d, nil
}

type hostDevice struct {
	fault func(Direction, []CopyOp) error
	pacer *pacer // nil: unlimited bandwidth

	mu     sync.Mutex
	closed bool
	arenas map[*hostArena]struct{}
	bufs   map[*hostBuffer]struct{}
	pinned hostRanges // the live bufs' memory: what streams may copy with
}

func (d *hostDevice) Name() string { return "host" }

func (d *hostDevice) NewArena(numBlocks, blockBytes int) (Arena, error) {
	g, total, err := newGeom(numBlocks, blockBytes)
	if err != nil {
		return nil, err
	}
	return d.newArena(g, total)
}

func (d *hostDevice) NewKVArena(l Layout, numBlocks int) (Arena, error) {
	g, total, err := newKVGeom(l, numBlocks)
	if err != nil {
		return nil, err
	}
	return d.newArena(g, total)
}

func (d *hostDevice) newArena(g geom, total int) (Arena, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	mem, err := mapAnon(total, fmt.Sprintf("host arena of %d blocks x %d bytes", g.numBlocks, g.blockBytes))
	if err != nil {
		return nil, err
	}
	a := &hostArena{
		geom:     g,
		dev:      d,
		mem:      mem,
		streams:  make(map[*hostStream]struct{}),
		unmapped: make(chan struct{}),
	}
	d.arenas[a] = struct{}{}
	return a, nil
}

func (d *hostDevice) NewStream(arena Arena) (Stream, error) {
	a, ok := arena.(*hostArena)
	if !ok || a.dev != d {
		return nil, fmt.Errorf("kvtier: arena %T does not belong to this host device", arena)
	}
	s := &hostStream{arena: a, quit: make(chan struct{})}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.freed.Load() {
		return nil, ErrClosed
	}
	s.q = newFIFO(s.run)
	a.streams[s] = struct{}{}
	return s, nil
}

// CheckFence implements Device: a host stream waits on any fence, on the
// host.
func (d *hostDevice) CheckFence(Fence) error { return nil }

func (d *hostDevice) AllocHost(n int) (HostBuffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: host buffer of %d bytes", ErrInvalidSize, n)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	mem, locked, err := allocPageLocked(n)
	if err != nil {
		return nil, err
	}
	b := &hostBuffer{dev: d, mem: mem, locked: locked}
	d.bufs[b] = struct{}{}
	d.pinned.add(mem)
	return b, nil
}

func (d *hostDevice) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	arenas, bufs := d.arenas, d.bufs
	d.arenas, d.bufs = nil, nil
	d.mu.Unlock()

	var errs []error
	for a := range arenas {
		errs = append(errs, a.free())
	}
	for b := range bufs {
		errs = append(errs, b.release(true /* byDevice */))
	}
	return errors.Join(errs...)
}

type hostArena struct {
	geom
	dev *hostDevice

	// memMu keeps the mapping alive under synchronous accesses: they hold
	// it shared, free unmaps under it exclusively. Stream workers need no
	// lock: free drains them before unmapping.
	memMu sync.RWMutex
	mem   []byte // nil once unmapped

	freed   atomic.Bool
	mu      sync.Mutex // guards streams and the freed transition
	streams map[*hostStream]struct{}
	// unmapped is closed once free has drained the streams and unmapped:
	// a second free (Device.Close racing Arena.Free) waits for it.
	unmapped chan struct{}
}

func (a *hostArena) WriteBlock(block, off int, src []byte) error {
	return a.inBlock(block, off, src, a.write)
}

func (a *hostArena) ReadBlock(block, off int, dst []byte) error {
	return a.inBlock(block, off, dst, a.read)
}

func (a *hostArena) WriteRegion(r KVRegion, src []byte) error { return a.inRegion(r, src, a.write) }

func (a *hostArena) ReadRegion(r KVRegion, dst []byte) error { return a.inRegion(r, dst, a.read) }

// write copies src to a checked range of block's host form.
func (a *hostArena) write(block, off int, src []byte) error {
	a.memMu.RLock()
	defer a.memMu.RUnlock()
	if a.mem == nil {
		return ErrClosed
	}
	a.pieces(block, off, len(src), func(ao, bo, n int) { copy(a.mem[ao:ao+n], src[bo-off:]) })
	return nil
}

// read copies a checked range of block's host form into dst.
func (a *hostArena) read(block, off int, dst []byte) error {
	a.memMu.RLock()
	defer a.memMu.RUnlock()
	if a.mem == nil {
		return ErrClosed
	}
	a.pieces(block, off, len(dst), func(ao, bo, n int) { copy(dst[bo-off:bo-off+n], a.mem[ao:]) })
	return nil
}

func (a *hostArena) DevicePtr() uintptr {
	a.memMu.RLock()
	defer a.memMu.RUnlock()
	if a.mem == nil {
		return 0
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(a.mem)))
}

// Free frees the arena, and only then leaves the device's set: a
// Device.Close meanwhile finds it there and waits for its streams to drain
// before it unmaps the host buffers their copies use.
func (a *hostArena) Free() error {
	err := a.free()
	a.dev.mu.Lock()
	delete(a.dev.arenas, a)
	a.dev.mu.Unlock()
	return err
}

// free closes the arena's streams (draining them), marks it freed and
// unmaps its memory. A second call waits for the first to finish.
func (a *hostArena) free() error {
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
	for s := range streams {
		s.stop()
	}
	a.memMu.Lock()
	defer a.memMu.Unlock()
	mem := a.mem
	a.mem = nil
	return unmapAnon(mem)
}

// hostBatch is one enqueued batch; ops is a pooled copy of the caller's.
type hostBatch struct {
	dir   Direction
	ops   *[]CopyOp
	fence Fence // set for a WaitFence entry, which copies nothing
	ev    *Event
}

var opsPool = sync.Pool{New: func() any { return new([]CopyOp) }}

type hostStream struct {
	arena *hostArena
	q     *fifo[hostBatch]

	quit      chan struct{} // closed by Close: stop waiting on fences
	quitOnce  sync.Once
	abandoned bool // the worker gave up on a fence; owned by the worker
}

// WaitFence queues a wait on f: the worker runs no later batch before f is
// done.
func (s *hostStream) WaitFence(f Fence) error {
	if nilFence(f) {
		return fmt.Errorf("%w: nil fence", ErrBadFence)
	}
	if sf, ok := f.(*SignalFence); ok && sf.Abandoned() {
		return ErrFenceAbandoned // as a CUDA stream answers
	}
	ev := newEvent()
	return s.q.push(hostBatch{fence: f, ev: ev}, ev)
}

func (s *hostStream) CopyD2H(ops []CopyOp) (*Event, error) { return s.enqueue(D2H, ops) }
func (s *hostStream) CopyH2D(ops []CopyOp) (*Event, error) { return s.enqueue(H2D, ops) }

func (s *hostStream) enqueue(dir Direction, ops []CopyOp) (*Event, error) {
	if err := validateOps(ops, s.arena.numBlocks, s.arena.blockBytes); err != nil {
		return nil, err
	}
	if err := s.arena.dev.pinned.checkOps(ops); err != nil {
		return nil, err
	}
	p := opsPool.Get().(*[]CopyOp)
	*p = append((*p)[:0], ops...)
	ev := newEvent()
	if err := s.q.push(hostBatch{dir: dir, ops: p, ev: ev}, ev); err != nil {
		opsPool.Put(p)
		return nil, err
	}
	return ev, nil
}

// closed reports whether c is closed.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// run executes one batch on the stream's worker goroutine.
func (s *hostStream) run(b hostBatch) {
	if b.fence != nil {
		if !s.abandoned {
			var elsewhere <-chan struct{} // a SignalFence another stream or the device gave up on
			if sf, ok := b.fence.(*SignalFence); ok {
				elsewhere = sf.abandoned
			}
			select {
			case <-b.fence.Done():
			case <-elsewhere:
				s.abandoned = true
			case <-s.quit:
				s.abandoned = !fenceDone(b.fence)
				if sf, ok := b.fence.(*SignalFence); ok && s.abandoned {
					sf.abandon()
				}
			}
		} else if sf, ok := b.fence.(*SignalFence); ok && closed(s.quit) && !fenceDone(sf) {
			// Closing gives up every fence the stream still waits on, as
			// a CUDA stream's close does, not only the first.
			sf.abandon()
		}
		if s.abandoned {
			b.ev.complete(ErrFenceAbandoned)
		} else {
			b.ev.complete(nil)
		}
		return
	}
	a, d, ops := s.arena, s.arena.dev, *b.ops
	var err error
	if s.abandoned {
		err = fmt.Errorf("kvtier: %v batch of %d blocks: %w", b.dir, len(ops), ErrFenceAbandoned)
	}
	if err == nil && d.fault != nil {
		if ferr := d.fault(b.dir, ops); ferr != nil {
			err = fmt.Errorf("kvtier: %v batch of %d blocks: %w", b.dir, len(ops), ferr)
		}
	}
	if err == nil {
		var due time.Time
		if d.pacer != nil {
			due = d.pacer.reserve(b.dir, len(ops)*a.blockBytes)
		}
		// One segment per block when block-contiguous; 2 x Layers to
		// gather or scatter when layer-separate.
		seg, plane := a.segBytes, a.numBlocks*a.segBytes
		for _, op := range ops {
			at := op.Block * seg
			for s := 0; s < a.nseg; s, at = s+1, at+plane {
				host, dev := op.Host[s*seg:(s+1)*seg], a.mem[at:at+seg]
				if b.dir == D2H {
					copy(host, dev)
				} else {
					copy(dev, host)
				}
			}
		}
		if d.pacer != nil {
			d.pacer.wait(due)
		}
	}
	clear(ops)
	*b.ops = ops[:0]
	opsPool.Put(b.ops)
	b.ev.complete(err)
}

func (s *hostStream) Synchronize(ctx context.Context) error {
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

// stop abandons any fence wait and drains the queue.
func (s *hostStream) stop() {
	s.quitOnce.Do(func() { close(s.quit) })
	s.q.close()
}

func (s *hostStream) Close() error {
	s.stop()
	s.arena.mu.Lock()
	delete(s.arena.streams, s) // no-op once the arena is freed (nil map)
	s.arena.mu.Unlock()
	return nil
}

type hostBuffer struct {
	dev *hostDevice

	mu     sync.Mutex
	mem    []byte
	locked bool
	state  bufState
}

type bufState int

const (
	bufLive bufState = iota
	bufFreed
	bufReleased // by Device.Close
)

func (b *hostBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mem
}

func (b *hostBuffer) Pinned() bool { return b.locked }

func (b *hostBuffer) Free() error {
	b.dev.mu.Lock()
	delete(b.dev.bufs, b)
	b.dev.mu.Unlock()
	return b.release(false /* byDevice */)
}

func (b *hostBuffer) release(byDevice bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.state == bufFreed && byDevice:
		return nil // its owner freed it while Device.Close ran
	case b.state == bufFreed:
		panic("kvtier: host buffer freed twice")
	case b.state == bufReleased:
		return nil // Device.Close got there first
	}
	if byDevice {
		b.state = bufReleased
	} else {
		b.state = bufFreed
	}
	mem := b.mem
	b.mem = nil
	b.dev.pinned.remove(mem)
	return freePageLocked(mem, b.locked)
}
