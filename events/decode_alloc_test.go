package events

import (
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
)

// amplifiers are payloads of about 1 MiB whose length prefixes claim far
// more than they hold, or claim what they hold but fail on the first
// element the schema checks.
func amplifiers() map[string][]byte {
	const r = 1 << 20
	const levels = 32
	hdr := 5 * (levels + 1)
	ps := map[string][]byte{}
	// 33 nested 32-bit arrays, each claiming the bytes left.
	var p []byte
	for range levels + 1 {
		left := r + hdr - len(p) - 5
		p = binary.BigEndian.AppendUint32(append(p, 0xdd), uint32(left))
	}
	ps["nested arrays"] = append(p, make([]byte, r+hdr-len(p))...)
	// 33 nested 32-bit maps, each claiming half the bytes left, the key "".
	p = nil
	for range levels + 1 {
		left := r + hdr - len(p) - 5
		p = binary.BigEndian.AppendUint32(append(p, 0xdf), uint32(left/2))
		p = append(p, 0xa0)
	}
	ps["nested maps"] = append(p, make([]byte, r+hdr+levels+1-len(p))...)
	// [ts, [1M fixints], 0]: events that are not events.
	p = binary.BigEndian.AppendUint32([]byte{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd}, r)
	ps["fixint events"] = append(append(p, make([]byte, r)...), 0)
	// The same inside a batch: one event, the nested arrays or maps.
	for _, k := range []string{"nested arrays", "nested maps"} {
		p = append([]byte{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91}, ps[k]...)
		ps["batch of "+k] = append(p, 0)
	}
	return ps
}

// TestDecodeAllocationBounded: what DecodeBatch allocates follows what a
// payload holds, not what its length prefixes claim: each amplifier fails
// with ErrDecode having allocated at most 16 times its size.
func TestDecodeAllocationBounded(t *testing.T) {
	for name, p := range amplifiers() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := DecodeBatch(p)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrDecode) {
			t.Errorf("%s: %v, want ErrDecode", name, err)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 16*uint64(len(p)) {
			t.Errorf("%s: a payload of %d bytes allocated %d (%.0fx)", name, len(p), got, float64(got)/float64(len(p)))
		}
	}
}

// TestDecodeDepth: 32 levels of containers decode; 33 do not.
func TestDecodeDepth(t *testing.T) {
	nest := func(n int, c byte) []byte {
		p := []byte{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x92, 0xa0 | byte(len("AllBlocksCleared"))}
		p = append(p, "AllBlocksCleared"...)
		for range n {
			p = append(p, c)
			if c == 0x81 {
				p = append(p, 0xa0)
			}
		}
		return append(append(p, 0xc0), 0) // the innermost value, dp_rank
	}
	for _, c := range []byte{0x91, 0x81} {
		// The batch is at depth 0, its events list 1, the event 2, its
		// second element 3: 30 more containers reach depth 32.
		if _, err := DecodeBatch(nest(29, c)); err != nil {
			t.Errorf("0x%02x: 32 levels: %v", c, err)
		}
		if _, err := DecodeBatch(nest(30, c)); !errors.Is(err, ErrDecode) {
			t.Errorf("0x%02x: 33 levels: %v, want ErrDecode", c, err)
		}
	}
}
