package disk

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// TestChunkedReadVerifies: a payload big enough to be read a chunk at a time
// (its checksum summed chunk by chunk) reads back exact, and a byte flipped
// on disk in any chunk — the first, read with the header, a middle one, or
// the last, partial one — is a corrupt read, never data.
func TestChunkedReadVerifies(t *testing.T) {
	const size = 3*readChunk + 12345 // four reads, the last partial
	for _, at := range []int{0, readChunk + 7, size - 1} {
		cfg := testConfig(t, 2)
		cfg.PayloadBytes, cfg.CapacityBytes = size, 2*SlotBytes(size)
		cfg.NoDirectIO = true // the test rewrites the file behind the store
		s, _ := mustOpen(t, cfg)
		p := AlignedBuffer(size)
		for i := range p {
			p[i] = byte(i * 7)
		}
		if _, _, err := s.WriteSync(Meta{Hash: 1}, p); err != nil {
			t.Fatal(err)
		}
		got := AlignedBuffer(size)
		if _, n, err := s.ReadSync(1, got); err != nil || n != size || !bytes.Equal(got, p) {
			t.Fatalf("round trip: n=%d err=%v", n, err)
		}
		name, off, _ := s.slotLocation(1)
		f, err := os.OpenFile(name, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		b := []byte{0}
		pos := off + BlockSize + int64(at)
		if _, err := f.ReadAt(b, pos); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 0x40
		if _, err := f.WriteAt(b, pos); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if _, _, err := s.ReadSync(1, got); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d flipped: %v, want ErrCorrupt", at, err)
		}
		checkInv(t, s)
		mustClose(t, s)
	}
}
