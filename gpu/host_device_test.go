package gpu

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// These tests use host-backend features (fake clock, fault hook) and run
// in every build, since the host backend is always compiled.

// fakeClock is a manual Clock. Each After call is reported on asked, so a
// test knows the worker is waiting without sleeping.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
	asked   chan time.Duration
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1000, 0), asked: make(chan time.Duration, 64)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.mu.Lock()
	c.waiters = append(c.waiters, fakeWaiter{c.now.Add(d), ch})
	c.mu.Unlock()
	c.asked <- d
	return ch
}

// Advance moves time forward and fires the waiters that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.waiters = slices.DeleteFunc(c.waiters, func(w fakeWaiter) bool {
		if w.at.After(c.now) {
			return false
		}
		w.ch <- c.now
		return true
	})
}

func (c *fakeClock) nextAsk(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-c.asked:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("worker never waited on the clock")
		return 0
	}
}

func newHostForTest(t *testing.T, cfg HostConfig) Device {
	t.Helper()
	d, err := NewHost(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func TestNewHostRejectsNegativeBandwidth(t *testing.T) {
	if _, err := NewHost(HostConfig{BandwidthBytesPerSec: -1}); !errors.Is(err, ErrInvalidSize) {
		t.Errorf("error = %v, want ErrInvalidSize", err)
	}
}

// TestHostBandwidthPacing shows, with a fake clock, that a batch of N
// bytes completes no sooner than N/bw, that streams share one link per
// direction, and that the two directions are independent.
func TestHostBandwidthPacing(t *testing.T) {
	clk := newFakeClock()
	const bw = 1 << 20 // 1 MiB/s
	d := newHostForTest(t, HostConfig{BandwidthBytesPerSec: bw, Clock: clk})
	const blockBytes = 64 << 10
	arena, err := d.NewArena(8, blockBytes)
	if err != nil {
		t.Fatal(err)
	}
	s1, err := d.NewStream(arena)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := d.NewStream(arena)
	if err != nil {
		t.Fatal(err)
	}
	host := hostBlocks(t, d, 8, blockBytes)
	for i := range 4 {
		if err := arena.WriteBlock(i, 0, bytes.Repeat([]byte{byte(i + 1)}, blockBytes)); err != nil {
			t.Fatal(err)
		}
	}

	// 4 blocks = 256 KiB at 1 MiB/s: 250ms on the D2H link.
	ev1, err := s1.CopyD2H([]CopyOp{{0, host[0]}, {1, host[1]}, {2, host[2]}, {3, host[3]}})
	if err != nil {
		t.Fatal(err)
	}
	if got := clk.nextAsk(t); got != 250*time.Millisecond {
		t.Fatalf("first batch waits %v, want 250ms", got)
	}
	clk.Advance(249 * time.Millisecond)
	if isDone(ev1) {
		t.Fatal("batch completed before the link could carry it")
	}

	// A second stream's D2H queues behind the first on the shared link:
	// 128 KiB more, due at 250ms+125ms, and it is now 249ms.
	ev2, err := s2.CopyD2H([]CopyOp{{0, host[4]}, {1, host[5]}})
	if err != nil {
		t.Fatal(err)
	}
	if got := clk.nextAsk(t); got != 126*time.Millisecond {
		t.Fatalf("second batch waits %v, want 126ms", got)
	}
	// H2D is a separate link: one 64 KiB block takes 62.5ms from now.
	ev3, err := s2.CopyH2D([]CopyOp{{7, host[6]}})
	if err != nil {
		t.Fatal(err)
	}
	_ = ev3
	// s2 is in order, so its H2D runs after its D2H completes; drive time.
	clk.Advance(time.Millisecond) // t = 250ms
	if err := waitDone(t, ev1); err != nil {
		t.Fatal(err)
	}
	if isDone(ev2) {
		t.Fatal("second batch completed before the shared link freed up")
	}
	clk.Advance(125 * time.Millisecond) // t = 375ms
	if err := waitDone(t, ev2); err != nil {
		t.Fatal(err)
	}
	if got := clk.nextAsk(t); got != 62500*time.Microsecond {
		t.Fatalf("H2D batch waits %v, want 62.5ms", got)
	}
	clk.Advance(62500 * time.Microsecond)
	if err := waitDone(t, ev3); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if !bytes.Equal(host[i], bytes.Repeat([]byte{byte(i + 1)}, blockBytes)) {
			t.Errorf("host block %d has wrong data after paced copy", i)
		}
	}
	if host[4][0] != 1 || host[5][0] != 2 {
		t.Error("second stream's paced copy has wrong data")
	}
}

func TestTransferTime(t *testing.T) {
	for _, c := range []struct {
		n, bw uint64
		want  time.Duration
	}{
		{1 << 20, 1 << 20, time.Second},
		{1, 3, 333333334 * time.Nanosecond}, // rounded up
		{25 << 30, 25 << 30, time.Second},
		{1 << 62, 1, time.Duration(1<<63 - 1)}, // saturates
		{0, 7, 0},
	} {
		if got := transferTime(c.n, c.bw); got != c.want {
			t.Errorf("transferTime(%d, %d) = %v, want %v", c.n, c.bw, got, c.want)
		}
	}
}

// TestHostFaultFailsBatch injects an error for one batch: it reaches
// Event.Err, nothing of that batch is copied, and the stream goes on.
func TestHostFaultFailsBatch(t *testing.T) {
	errInjected := errors.New("injected PCIe error")
	var calls []Direction // only the worker goroutine appends
	d := newHostForTest(t, HostConfig{Fault: func(dir Direction, ops []CopyOp) error {
		calls = append(calls, dir)
		for _, op := range ops {
			if dir == H2D && op.Block == 5 {
				return errInjected
			}
		}
		return nil
	}})
	l := testLayout(t)
	arena, s := sizedArenaStream(t, d, 8, l.BlockBytes())
	h := hostBlocks(t, d, 8, l.BlockBytes())
	for i := range h {
		fillBlock(l, h[i], uint64(i)+1)
	}
	batch := func(blocks ...int) []CopyOp {
		var ops []CopyOp
		for _, b := range blocks {
			ops = append(ops, CopyOp{Block: b, Host: h[b]})
		}
		return ops
	}
	evA, _ := s.CopyH2D(batch(0, 1, 2, 3))
	evB, _ := s.CopyH2D(batch(4, 5, 6))
	evC, _ := s.CopyH2D(batch(7))
	if err := waitDone(t, evA); err != nil {
		t.Errorf("batch A: %v", err)
	}
	if err := waitDone(t, evB); !errors.Is(err, errInjected) {
		t.Errorf("batch B: error %v, want the injected one", err)
	}
	if err := waitDone(t, evC); err != nil {
		t.Errorf("batch C after a failed batch: %v", err)
	}
	if want := []Direction{H2D, H2D, H2D}; !slices.Equal(calls, want) {
		t.Errorf("fault hook saw %v, want %v", calls, want)
	}
	got := make([]byte, l.BlockBytes())
	zero := make([]byte, l.BlockBytes())
	for b := range 8 {
		if err := arena.ReadBlock(b, 0, got); err != nil {
			t.Fatal(err)
		}
		failed := b >= 4 && b <= 6
		if failed && !bytes.Equal(got, zero) {
			t.Errorf("block %d of the failed batch was written", b)
		}
		if !failed && !bytes.Equal(got, h[b]) {
			t.Errorf("block %d of a good batch is wrong", b)
		}
	}
}

// gatedHost returns a host device whose first copy blocks in the fault
// hook until release is closed; entered is closed once it is blocked.
func gatedHost(t *testing.T) (d Device, entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	d = newHostForTest(t, HostConfig{Fault: func(Direction, []CopyOp) error {
		first := false
		once.Do(func() { first = true })
		if first {
			close(entered)
			<-release
		}
		return nil
	}})
	return d, entered, release
}

func TestEventErrBeforeDoneAndSynchronizeCancel(t *testing.T) {
	d, entered, release := gatedHost(t)
	arena, err := d.NewArena(2, 16)
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.NewStream(arena)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ev, err := s.CopyD2H([]CopyOp{{0, hostBlocks(t, d, 1, 16)[0]}})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	if err := ev.Err(); !errors.Is(err, ErrNotDone) {
		t.Errorf("Err before done = %v, want ErrNotDone", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Synchronize(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Synchronize with a cancelled context = %v", err)
	}
	if err := ev.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a cancelled context = %v", err)
	}
	close(release)
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := ev.Wait(context.Background()); err != nil {
		t.Errorf("Wait after done = %v", err)
	}
}

// TestHostCloseDrainsBlockedStream closes a stream whose worker is stuck
// in a copy with more batches queued behind it: Close waits for all of
// them, and each completes with its result.
func TestHostCloseDrainsBlockedStream(t *testing.T) {
	d, entered, release := gatedHost(t)
	l := testLayout(t)
	arena, err := d.NewArena(4, l.BlockBytes())
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.NewStream(arena)
	if err != nil {
		t.Fatal(err)
	}
	h := hostBlocks(t, d, 10, l.BlockBytes())
	for i := range 4 {
		fillBlock(l, h[i], uint64(i)+50)
	}
	var evs []*Event
	for i := range 4 {
		ev, err := s.CopyH2D([]CopyOp{{i, h[i]}})
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	<-entered // the worker holds batch 0; batches 1..3 are queued
	for i := range 6 {
		ev, err := s.CopyD2H([]CopyOp{{i % 4, h[4+i]}})
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		if !isDone(ev) {
			t.Fatalf("event %d not done after Close", i)
		}
		if err := ev.Err(); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	for i := range 6 {
		if !bytes.Equal(h[4+i], h[i%4]) {
			t.Errorf("drained D2H %d has wrong data", i)
		}
	}
}

func TestHostNewStreamForeignArena(t *testing.T) {
	d1 := newHostForTest(t, HostConfig{})
	d2 := newHostForTest(t, HostConfig{})
	a, err := d1.NewArena(1, 8)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d2.NewStream(a); err == nil {
		t.Error("a device accepted another device's arena")
	}
}

// TestHostKVArenaPhysicalLayout checks where the host backend puts the
// bytes: a layer-separate arena is vLLM's [layer][kv][block][token][head][dim].
func TestHostKVArenaPhysicalLayout(t *testing.T) {
	d, err := NewHost(HostConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const n = 3
	l, a, s := newKVArena(t, d, LayerSeparate, n)
	host := hostBlocks(t, d, n, l.BlockBytes())
	var ops []CopyOp
	for b := range n {
		fillBlock(l, host[b], uint64(7+b))
		ops = append(ops, CopyOp{Block: b, Host: host[b]})
	}
	ev, err := s.CopyH2D(ops)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitDone(t, ev); err != nil {
		t.Fatal(err)
	}
	mem := a.(*hostArena).mem
	r := l.RegionBytes()
	for layer := range testSpec.Layers {
		for kvi, kv := range []KV{Key, Value} {
			for b := range n {
				at := ((layer*2+kvi)*n + b) * r
				off, _ := l.Region(layer, kv)
				if !bytes.Equal(mem[at:at+r], host[b][off:off+r]) {
					t.Fatalf("layer %d %v block %d is not at %d", layer, kv, b, at)
				}
			}
		}
	}
}
