package gpu

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"unsafe"
)

// The tests in this file use only the Device interface through Default, so
// they exercise whichever backend the build selects.

func TestDeviceRoundTripManyBatches(t *testing.T) {
	d := newTestDevice(t)
	l := testLayout(t)
	const blocks = 96
	arena, s := sizedArenaStream(t, d, blocks, l.BlockBytes())

	src := hostBlocks(t, d, blocks, l.BlockBytes())
	dst := hostBlocks(t, d, blocks, l.BlockBytes())
	for b := range src {
		fillBlock(l, src[b], uint64(b)*0x9e3779b97f4a7c15+1)
	}

	// Upload in batches of varying size, in a shuffled block order, each
	// host block i going to arena block perm[i].
	r := rand.New(rand.NewPCG(1, 2))
	perm := r.Perm(blocks)
	var ops []CopyOp
	var evs []*Event
	for i := 0; i < blocks; {
		n := min(1+r.IntN(13), blocks-i)
		ops = ops[:0]
		for j := i; j < i+n; j++ {
			ops = append(ops, CopyOp{Block: perm[j], Host: src[j]})
		}
		ev, err := s.CopyH2D(ops)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
		i += n
	}
	// Download with a different batching, reusing the ops slice right
	// after each call (the stream must not retain it).
	for i := 0; i < blocks; {
		n := min(1+r.IntN(31), blocks-i)
		ops = ops[:0]
		for j := i; j < i+n; j++ {
			ops = append(ops, CopyOp{Block: perm[j], Host: dst[j]})
		}
		ev, err := s.CopyD2H(ops)
		if err != nil {
			t.Fatal(err)
		}
		clear(ops)
		evs = append(evs, ev)
		i += n
	}
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		if !isDone(ev) {
			t.Fatalf("event %d not done after Synchronize", i)
		}
		if err := ev.Err(); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	for j := range blocks {
		if !bytes.Equal(src[j], dst[j]) {
			t.Fatalf("host block %d (arena block %d) differs after round trip", j, perm[j])
		}
	}
	// The arena holds each block where it was sent.
	got := make([]byte, l.BlockBytes())
	for _, j := range []int{0, blocks / 2, blocks - 1} {
		if err := arena.ReadBlock(perm[j], 0, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, src[j]) {
			t.Errorf("arena block %d does not hold host block %d", perm[j], j)
		}
	}
}

// TestStreamInOrder checks that events complete in enqueue order and that
// a D2H of a block sees the H2D enqueued before it without any wait.
func TestStreamInOrder(t *testing.T) {
	d := newTestDevice(t)
	l := testLayout(t)
	_, s := sizedArenaStream(t, d, 4, l.BlockBytes())
	const rounds = 40
	up := hostBlocks(t, d, rounds, l.BlockBytes())
	down := hostBlocks(t, d, rounds, l.BlockBytes())
	var evs []*Event
	for i := range rounds {
		fillBlock(l, up[i], uint64(i)+100)
		blk := i % 4
		e1, err := s.CopyH2D([]CopyOp{{Block: blk, Host: up[i]}})
		if err != nil {
			t.Fatal(err)
		}
		e2, err := s.CopyD2H([]CopyOp{{Block: blk, Host: down[i]}})
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e1, e2)
	}
	for i := len(evs) - 1; i >= 0; i-- { // wait newest first
		if err := waitDone(t, evs[i]); err != nil {
			t.Fatal(err)
		}
		for j := range i {
			if !isDone(evs[j]) {
				t.Fatalf("event %d done before earlier event %d", i, j)
			}
		}
	}
	for i := range rounds {
		if !bytes.Equal(up[i], down[i]) {
			t.Fatalf("round %d: D2H did not see the H2D enqueued before it", i)
		}
	}
}

func TestStreamRejectsBadBatch(t *testing.T) {
	d := newTestDevice(t)
	l := testLayout(t)
	arena, s := sizedArenaStream(t, d, 8, l.BlockBytes())
	h := hostBlocks(t, d, 3, l.BlockBytes())
	fillBlock(l, h[0], 7)
	short := h[1][:l.BlockBytes()-1]

	cases := []struct {
		name  string
		ops   []CopyOp
		index int
	}{
		{"block past end", []CopyOp{{0, h[0]}, {8, h[1]}}, 1},
		{"negative block", []CopyOp{{0, h[0]}, {1, h[1]}, {-1, h[2]}}, 2},
		{"short host buffer", []CopyOp{{0, h[0]}, {1, short}}, 1},
		{"nil host buffer", []CopyOp{{2, nil}}, 0},
	}
	for _, c := range cases {
		for _, dir := range []Direction{H2D, D2H} {
			copyFn := s.CopyH2D
			if dir == D2H {
				copyFn = s.CopyD2H
			}
			ev, err := copyFn(c.ops)
			var ce *CopyError
			if !errors.Is(err, ErrBadCopy) || !errors.As(err, &ce) || ce.Index != c.index {
				t.Errorf("%s %v: error %v, want *CopyError at index %d", c.name, dir, err, c.index)
			}
			if ev != nil {
				t.Errorf("%s %v: got an event for a rejected batch", c.name, dir)
			}
		}
	}
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Nothing was copied: block 0 of the arena is still zero, and the D2H
	// targets (h[1], h[2]) still hold what they held.
	got := make([]byte, l.BlockBytes())
	if err := arena.ReadBlock(0, 0, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, make([]byte, l.BlockBytes())) {
		t.Error("a rejected H2D batch wrote block 0")
	}
	if !bytes.Equal(h[1], make([]byte, l.BlockBytes())) || !bytes.Equal(h[2], make([]byte, l.BlockBytes())) {
		t.Error("a rejected D2H batch wrote host memory")
	}
}

func TestArenaReadWriteBlock(t *testing.T) {
	d := newTestDevice(t)
	arena, err := d.NewArena(3, 64)
	if err != nil {
		t.Fatal(err)
	}
	if arena.NumBlocks() != 3 || arena.BlockBytes() != 64 {
		t.Fatalf("arena geometry %d x %d", arena.NumBlocks(), arena.BlockBytes())
	}
	if err := arena.WriteBlock(1, 60, []byte{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 6)
	if err := arena.ReadBlock(1, 58, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, []byte{0, 0, 1, 2, 3, 4}) {
		t.Errorf("ReadBlock = %v", got)
	}
	// Neighbouring blocks are untouched.
	edge := make([]byte, 1)
	if err := arena.ReadBlock(2, 0, edge); err != nil || edge[0] != 0 {
		t.Errorf("block 2 byte 0 = %v, %v", edge, err)
	}
	for _, c := range []struct{ block, off, n int }{
		{3, 0, 1}, {-1, 0, 1}, {0, 61, 4}, {0, -1, 1}, {0, 65, 0},
	} {
		if err := arena.WriteBlock(c.block, c.off, make([]byte, c.n)); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("WriteBlock(%d,%d,%d bytes) error = %v", c.block, c.off, c.n, err)
		}
		if err := arena.ReadBlock(c.block, c.off, make([]byte, c.n)); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("ReadBlock(%d,%d,%d bytes) error = %v", c.block, c.off, c.n, err)
		}
	}
	for _, c := range []struct{ blocks, bytes int }{{0, 64}, {4, 0}, {-1, 8}} {
		if _, err := d.NewArena(c.blocks, c.bytes); !errors.Is(err, ErrInvalidSize) {
			t.Errorf("NewArena(%d,%d) error = %v", c.blocks, c.bytes, err)
		}
	}
	if err := arena.Free(); err != nil {
		t.Fatal(err)
	}
	if err := arena.ReadBlock(0, 0, got); !errors.Is(err, ErrClosed) {
		t.Errorf("ReadBlock after Free: %v", err)
	}
	if _, err := d.NewStream(arena); !errors.Is(err, ErrClosed) {
		t.Errorf("NewStream on freed arena: %v", err)
	}
	if err := arena.Free(); err != nil {
		t.Errorf("second Free: %v", err)
	}
}

func TestAllocHost(t *testing.T) {
	d := newTestDevice(t)
	buf, err := d.AllocHost(10000)
	if err != nil {
		t.Fatal(err)
	}
	mem := buf.Bytes()
	if len(mem) != 10000 {
		t.Fatalf("len = %d", len(mem))
	}
	if p := uintptr(unsafe.Pointer(&mem[0])); p%uintptr(os.Getpagesize()) != 0 {
		t.Errorf("buffer at %#x is not page aligned", p)
	}
	if !bytes.Equal(mem, make([]byte, len(mem))) {
		t.Error("host buffer not zeroed")
	}
	t.Logf("%s: pinned=%v", d.Name(), buf.Pinned())
	if err := buf.Free(); err != nil {
		t.Fatal(err)
	}
	if buf.Bytes() != nil {
		t.Error("Bytes after Free is not nil")
	}
	defer func() {
		r, _ := recover().(string)
		if len(r) < 8 || r[:8] != "kvtier: " {
			t.Errorf("double Free: recovered %q, want a kvtier: panic", r)
		}
	}()
	_ = buf.Free()
}

func TestAllocHostInvalid(t *testing.T) {
	d := newTestDevice(t)
	for _, n := range []int{0, -5} {
		if _, err := d.AllocHost(n); !errors.Is(err, ErrInvalidSize) {
			t.Errorf("AllocHost(%d) error = %v", n, err)
		}
	}
}

// TestStreamCloseWithCopiesInFlight closes a stream while batches are
// queued and others are still being enqueued from several goroutines:
// every accepted batch completes (Close drains), later ones get
// ErrClosed, and nothing hangs.
func TestStreamCloseWithCopiesInFlight(t *testing.T) {
	d := newTestDevice(t)
	l := testLayout(t)
	const blocks = 32
	arena, err := d.NewArena(blocks, l.BlockBytes())
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.NewStream(arena)
	if err != nil {
		t.Fatal(err)
	}
	const workers, perWorker = 4, 25
	host := hostBlocks(t, d, workers*perWorker, l.BlockBytes())

	type result struct {
		evs    []*Event
		closed int
		other  error
	}
	results := make([]result, workers) // one per goroutine: no shared error
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := &results[w]
			for i := range perWorker {
				op := []CopyOp{{Block: (w*perWorker + i) % blocks, Host: host[w*perWorker+i]}}
				ev, err := s.CopyD2H(op)
				switch {
				case err == nil:
					res.evs = append(res.evs, ev)
				case errors.Is(err, ErrClosed):
					res.closed++
				default:
					res.other = err
				}
			}
		}()
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	accepted := 0
	for w, res := range results {
		if res.other != nil {
			t.Fatalf("worker %d: %v", w, res.other)
		}
		for _, ev := range res.evs {
			if !isDone(ev) {
				t.Fatal("an accepted batch was not complete when Close returned")
			}
			if err := ev.Err(); err != nil {
				t.Fatalf("accepted batch failed: %v", err)
			}
		}
		accepted += len(res.evs)
		if len(res.evs)+res.closed != perWorker {
			t.Fatalf("worker %d: %d accepted + %d closed != %d", w, len(res.evs), res.closed, perWorker)
		}
	}
	t.Logf("%d of %d batches accepted before Close", accepted, workers*perWorker)
	if _, err := s.CopyH2D([]CopyOp{{0, host[0]}}); !errors.Is(err, ErrClosed) {
		t.Errorf("CopyH2D after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := s.Synchronize(context.Background()); err != nil {
		t.Errorf("Synchronize after Close: %v", err)
	}
}

// TestDeviceCloseReleasesEverything closes a device with a stream holding
// queued work, an arena and a host buffer, and checks they all refuse use.
func TestDeviceCloseReleasesEverything(t *testing.T) {
	d, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	l := testLayout(t)
	arena, err := d.NewArena(4, l.BlockBytes())
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.NewStream(arena)
	if err != nil {
		t.Fatal(err)
	}
	buf, err := d.AllocHost(l.BlockBytes())
	if err != nil {
		t.Fatal(err)
	}
	var evs []*Event
	for i := range 8 {
		ev, err := s.CopyH2D([]CopyOp{{Block: i % 4, Host: buf.Bytes()}})
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		if !isDone(ev) || ev.Err() != nil {
			t.Fatalf("event %d after device Close: done=%v err=%v", i, isDone(ev), ev.Err())
		}
	}
	if _, err := s.CopyD2H(nil); !errors.Is(err, ErrClosed) {
		t.Errorf("CopyD2H after device Close: %v", err)
	}
	if err := arena.WriteBlock(0, 0, []byte{1}); !errors.Is(err, ErrClosed) {
		t.Errorf("WriteBlock after device Close: %v", err)
	}
	if _, err := d.NewArena(1, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("NewArena after device Close: %v", err)
	}
	if _, err := d.AllocHost(1); !errors.Is(err, ErrClosed) {
		t.Errorf("AllocHost after device Close: %v", err)
	}
	if err := buf.Free(); err != nil {
		t.Errorf("Free of a buffer the device released: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// An allocation the machine cannot back is an error the caller can handle,
// not a fatal runtime crash (which make([]byte, n) would be), and leaves
// the device usable.
func TestAllocationFailureIsAnError(t *testing.T) {
	d := newTestDevice(t)
	for _, total := range []int{1 << 46, 1 << 48} {
		if a, err := d.NewArena(1<<16, total>>16); !errors.Is(err, ErrOutOfMemory) || a != nil {
			t.Errorf("NewArena of %d bytes = %v, %v; want ErrOutOfMemory", total, a, err)
		} else {
			t.Logf("NewArena of %d bytes: %v", total, err)
		}
		if b, err := d.AllocHost(total); !errors.Is(err, ErrOutOfMemory) || b != nil {
			t.Errorf("AllocHost(%d) = %v, %v; want ErrOutOfMemory", total, b, err)
		}
	}
	a, err := d.NewArena(2, 4096)
	if err != nil {
		t.Fatalf("NewArena after a failed one: %v", err)
	}
	if err := a.WriteBlock(1, 0, []byte{1}); err != nil {
		t.Fatal(err)
	}
}

// TestStreamRejectsUnpinnedHost: the CUDA driver copies after the call
// returns and only from page-locked memory it allocated, so both backends
// accept only host memory inside a live buffer from the same device's
// AllocHost, and reject a batch with any other op whole.
func TestStreamRejectsUnpinnedHost(t *testing.T) {
	d := newTestDevice(t)
	arena, s := sizedArenaStream(t, d, 2, 4096)
	if err := arena.WriteBlock(1, 0, []byte{42}); err != nil {
		t.Fatal(err)
	}
	other, err := NewHost(HostConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	pinned := hostBlocks(t, d, 1, 4096)
	otherMem := hostBlocks(t, other, 1, 4096)[0]
	// Allocated last and nothing allocated until the checks: mmap would
	// hand the freed addresses to the next buffer.
	freed, err := d.AllocHost(4096)
	if err != nil {
		t.Fatal(err)
	}
	freedMem := freed.Bytes()
	if err := freed.Free(); err != nil {
		t.Fatal(err)
	}
	for name, host := range map[string][]byte{
		"Go":               make([]byte, 4096),
		"another device's": otherMem,
		"a freed buffer's": freedMem,
	} {
		for _, dir := range []Direction{D2H, H2D} {
			copyFn := s.CopyD2H
			if dir == H2D {
				copyFn = s.CopyH2D
			}
			ev, err := copyFn([]CopyOp{{0, pinned[0]}, {1, host}})
			var ce *CopyError
			if !errors.Is(err, ErrNotPinned) || !errors.As(err, &ce) || ce.Index != 1 || ev != nil {
				t.Errorf("%v with %s memory: event %v, %v; want ErrNotPinned for op 1", dir, name, ev != nil, err)
			}
		}
	}
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	if pinned[0][0] != 0 {
		t.Error("a rejected batch copied its first op")
	}
	// Any sub-slice of a live buffer is accepted.
	big := hostBlocks(t, d, 3, 4096)
	ev, err := s.CopyD2H([]CopyOp{{1, big[1]}, {1, big[2]}})
	if err != nil {
		t.Fatalf("sub-slices of a pinned buffer rejected: %v", err)
	}
	if err := waitDone(t, ev); err != nil || big[1][0] != 42 || big[2][0] != 42 {
		t.Fatalf("copy into sub-slices: %v, got %d %d", err, big[1][0], big[2][0])
	}
}
