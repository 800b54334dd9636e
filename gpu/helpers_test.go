package gpu

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"
)

// testSpec is small enough that many blocks fit in a fast test and large
// enough that each (layer, K/V) region spans several cache lines.
var testSpec = ModelSpec{Layers: 4, KVHeads: 2, HeadDim: 16, DType: F16}

func testLayout(t testing.TB) Layout {
	t.Helper()
	l, err := NewLayout(testSpec, 16) // 8 KiB blocks
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// fillBlock writes into buf (one block) a pattern that depends on the
// block's hash, the layer and K/V, so a misplaced region or block shows.
func fillBlock(l Layout, buf []byte, hash uint64) {
	for layer := range l.Spec().Layers {
		for _, kv := range []KV{Key, Value} {
			off, size := l.Region(layer, kv)
			r := rand.New(rand.NewPCG(hash, uint64(layer)<<8|uint64(kv)))
			region := buf[off : off+size]
			for i := 0; i+8 <= len(region); i += 8 {
				binary.LittleEndian.PutUint64(region[i:], r.Uint64())
			}
		}
	}
}

// waitDone waits for ev, failing the test if it has not completed within
// a generous bound (a hang guard, not a synchronisation device).
func waitDone(t testing.TB, ev *Event) error {
	t.Helper()
	select {
	case <-ev.Done():
		return ev.Err()
	case <-time.After(10 * time.Second):
		t.Fatal("event did not complete within 10s")
		return nil
	}
}

func isDone(ev *Event) bool {
	select {
	case <-ev.Done():
		return true
	default:
		return false
	}
}

// newTestDevice opens the build's default device and closes it at cleanup.
func newTestDevice(t testing.TB) Device {
	t.Helper()
	d, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

// hostBlocks allocates n blocks of pinned host memory and returns one
// slice per block.
func hostBlocks(t testing.TB, d Device, n, blockBytes int) [][]byte {
	t.Helper()
	buf, err := d.AllocHost(n * blockBytes)
	if err != nil {
		t.Fatal(err)
	}
	mem := buf.Bytes()
	out := make([][]byte, n)
	for i := range out {
		out[i] = mem[i*blockBytes : (i+1)*blockBytes : (i+1)*blockBytes]
	}
	return out
}

// arenaStream makes a one-block arena on d and a stream over it.
func arenaStream(t *testing.T, d Device) (Arena, Stream) {
	t.Helper()
	a, err := d.NewArena(1, 4096)
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.NewStream(a)
	if err != nil {
		t.Fatal(err)
	}
	return a, s
}

// sizedArenaStream makes an arena of numBlocks blocks of blockBytes on d
// and a stream over it, closed when the test ends (before d).
func sizedArenaStream(t testing.TB, d Device, numBlocks, blockBytes int) (Arena, Stream) {
	t.Helper()
	arena, err := d.NewArena(numBlocks, blockBytes)
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.NewStream(arena)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return arena, s
}
