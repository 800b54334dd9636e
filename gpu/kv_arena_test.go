package gpu

import (
	"bytes"
	"errors"
	"testing"
)

// newKVArena makes an arena of n blocks of testLayout's shape in the given
// kind, with a stream.
func newKVArena(t *testing.T, d Device, kind LayoutKind, n int) (Layout, Arena, Stream) {
	t.Helper()
	l, err := NewLayoutKind(testSpec, 16, kind)
	if err != nil {
		t.Fatal(err)
	}
	a, err := d.NewKVArena(l, n)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := a.Layout(); !ok || got != l || a.BlockBytes() != l.BlockBytes() || a.NumBlocks() != n {
		t.Fatalf("arena layout %v, %v; geometry %d x %d", got, ok, a.NumBlocks(), a.BlockBytes())
	}
	s, err := d.NewStream(a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return l, a, s
}

// hostRegion is r's bytes inside a block in host form.
func hostRegion(l Layout, block []byte, r KVRegion) []byte {
	off, _ := l.Region(r.Layer, r.KV)
	return block[off+r.Start*l.TokenBytes() : off+r.End*l.TokenBytes()]
}

// TestKVArenaRegionRoundTrip: in both kinds, a block written whole reads
// back region by region, a region written reads back whole, and the
// untouched bytes stay.
func TestKVArenaRegionRoundTrip(t *testing.T) {
	d := newTestDevice(t)
	for _, kind := range kinds {
		t.Run(kind.String(), func(t *testing.T) {
			const n = 3
			l, a, _ := newKVArena(t, d, kind, n)
			want := make([][]byte, n)
			for b := range n {
				want[b] = make([]byte, l.BlockBytes())
				fillBlock(l, want[b], uint64(b+1))
				if err := a.WriteBlock(b, 0, want[b]); err != nil {
					t.Fatal(err)
				}
			}
			for b := range n {
				for layer := range testSpec.Layers {
					for _, kv := range []KV{Key, Value} {
						for _, tr := range [][2]int{{0, 16}, {3, 9}, {15, 16}, {5, 5}} {
							r := KVRegion{Block: b, Layer: layer, KV: kv, Start: tr[0], End: tr[1]}
							got := make([]byte, (tr[1]-tr[0])*l.TokenBytes())
							if err := a.ReadRegion(r, got); err != nil {
								t.Fatal(err)
							}
							if !bytes.Equal(got, hostRegion(l, want[b], r)) {
								t.Fatalf("ReadRegion(%+v) differs from the block written", r)
							}
						}
					}
				}
			}
			// Overwrite tokens 2..6 of block 1's layer 3 V, then read the
			// whole block back and a neighbour's region.
			r := KVRegion{Block: 1, Layer: 3, KV: Value, Start: 2, End: 6}
			patch := bytes.Repeat([]byte{0xAB}, 4*l.TokenBytes())
			if err := a.WriteRegion(r, patch); err != nil {
				t.Fatal(err)
			}
			copy(hostRegion(l, want[1], r), patch)
			for b := range n {
				got := make([]byte, l.BlockBytes())
				if err := a.ReadBlock(b, 0, got); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want[b]) {
					t.Fatalf("block %d after WriteRegion differs", b)
				}
			}
			// A ReadBlock range crossing regions gathers across segments.
			off, _ := l.Region(1, Value)
			got := make([]byte, 3*l.RegionBytes())
			if err := a.ReadBlock(2, off-7, got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want[2][off-7:off-7+len(got)]) {
				t.Fatal("ReadBlock across region boundaries differs")
			}
		})
	}
}

// TestKVArenaCopiesAreLayoutIndependent: the same blocks in a
// block-contiguous and a layer-separate arena copy out (D2H, a gather for
// layer-separate) to identical host bytes, and a block copied in (H2D, a
// scatter) lands in every region.
func TestKVArenaCopiesAreLayoutIndependent(t *testing.T) {
	d := newTestDevice(t)
	const n = 4
	lb, bc, sb := newKVArena(t, d, BlockContiguous, n)
	ll, ls, sl := newKVArena(t, d, LayerSeparate, n)
	src := hostBlocks(t, d, n, lb.BlockBytes())
	for b := range n {
		fillBlock(lb, src[b], uint64(100+b))
		if err := bc.WriteBlock(b, 0, src[b]); err != nil {
			t.Fatal(err)
		}
		// The layer-separate arena is filled region by region, as an
		// engine would write it.
		for layer := range testSpec.Layers {
			for _, kv := range []KV{Key, Value} {
				r := KVRegion{Block: b, Layer: layer, KV: kv, Start: 0, End: 16}
				if err := ls.WriteRegion(r, hostRegion(ll, src[b], r)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	outB, outL := hostBlocks(t, d, n, lb.BlockBytes()), hostBlocks(t, d, n, lb.BlockBytes())
	var opsB, opsL []CopyOp
	for b := range n {
		opsB = append(opsB, CopyOp{Block: b, Host: outB[n-1-b]})
		opsL = append(opsL, CopyOp{Block: b, Host: outL[n-1-b]})
	}
	evB, err := sb.CopyD2H(opsB)
	if err != nil {
		t.Fatal(err)
	}
	evL, err := sl.CopyD2H(opsL)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(waitDone(t, evB), waitDone(t, evL)); err != nil {
		t.Fatal(err)
	}
	for b := range n {
		if !bytes.Equal(outB[n-1-b], src[b]) || !bytes.Equal(outL[n-1-b], outB[n-1-b]) {
			t.Fatalf("block %d: D2H bytes differ between layouts or from the source", b)
		}
	}

	// Scatter: copy block 3's bytes into block 0 of the layer-separate
	// arena and read them back per region.
	ev, err := sl.CopyH2D([]CopyOp{{Block: 0, Host: src[3]}})
	if err != nil {
		t.Fatal(err)
	}
	if err := waitDone(t, ev); err != nil {
		t.Fatal(err)
	}
	for layer := range testSpec.Layers {
		for _, kv := range []KV{Key, Value} {
			for b, from := range map[int]int{0: 3, 1: 1} { // block 1 untouched
				r := KVRegion{Block: b, Layer: layer, KV: kv, Start: 0, End: 16}
				got := make([]byte, ll.RegionBytes())
				if err := ls.ReadRegion(r, got); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, hostRegion(ll, src[from], r)) {
					t.Fatalf("after H2D scatter, region %+v differs", r)
				}
			}
		}
	}
}

func TestKVArenaRegionErrors(t *testing.T) {
	d := newTestDevice(t)
	l, a, _ := newKVArena(t, d, LayerSeparate, 2)
	tb := l.TokenBytes()
	for _, c := range []struct {
		r    KVRegion
		n    int
		want error
	}{
		{KVRegion{Block: 2, Layer: 0, KV: Key, End: 1}, tb, ErrOutOfRange},
		{KVRegion{Block: 0, Layer: -1, KV: Key, End: 1}, tb, ErrOutOfRange},
		{KVRegion{Block: 0, Layer: 0, KV: 7, End: 1}, tb, ErrOutOfRange},
		{KVRegion{Block: 0, Layer: 0, KV: Key, Start: 2, End: 1}, 0, ErrOutOfRange},
		{KVRegion{Block: 0, Layer: 0, KV: Key, Start: 0, End: 17}, 17 * tb, ErrOutOfRange},
		{KVRegion{Block: 0, Layer: 0, KV: Key, Start: 0, End: 2}, tb, ErrShape},
	} {
		if err := a.ReadRegion(c.r, make([]byte, c.n)); !errors.Is(err, c.want) {
			t.Errorf("ReadRegion(%+v, %d bytes) = %v, want %v", c.r, c.n, err, c.want)
		}
		if err := a.WriteRegion(c.r, make([]byte, c.n)); !errors.Is(err, c.want) {
			t.Errorf("WriteRegion(%+v, %d bytes) = %v, want %v", c.r, c.n, err, c.want)
		}
	}
	if _, err := d.NewKVArena(Layout{}, 2); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("NewKVArena of a zero Layout = %v, want ErrInvalidSpec", err)
	}

	// Region pointers: base plus offset, gone after Free.
	p, err := RegionPtr(a, 1, 2, Value)
	off, _ := l.ArenaOffset(2, 1, 2, Value)
	if err != nil || a.DevicePtr() == 0 || p != a.DevicePtr()+uintptr(off) {
		t.Errorf("RegionPtr = %#x, %v; want %#x + %d", p, err, a.DevicePtr(), off)
	}
	if err := a.Free(); err != nil {
		t.Fatal(err)
	}
	if _, err := RegionPtr(a, 1, 2, Value); !errors.Is(err, ErrClosed) {
		t.Errorf("RegionPtr after Free = %v, want ErrClosed", err)
	}
	if err := a.ReadRegion(KVRegion{Block: 0, Layer: 0, KV: Key, End: 1}, make([]byte, tb)); !errors.Is(err, ErrClosed) {
		t.Errorf("ReadRegion after Free = %v, want ErrClosed", err)
	}

	// An arena of opaque blocks has no regions.
	raw, err := d.NewArena(2, l.BlockBytes())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := raw.Layout(); ok {
		t.Error("NewArena arena reports a layout")
	}
	if _, err := raw.RegionOffset(0, 0, Key); !errors.Is(err, ErrShape) {
		t.Errorf("RegionOffset on NewArena arena = %v, want ErrShape", err)
	}
	if err := raw.WriteRegion(KVRegion{Block: 0, Layer: 0, KV: Key, End: 1}, make([]byte, tb)); !errors.Is(err, ErrShape) {
		t.Errorf("WriteRegion on NewArena arena = %v, want ErrShape", err)
	}
}
