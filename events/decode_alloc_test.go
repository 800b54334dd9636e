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

// TestDecodeTokensAllocationBounded: one event carrying 256Ki token ids
// decodes straight into its []int64: what DecodeBatch allocates is that
// slice (8 bytes a token) and little more, whatever form the ids take on
// the wire (1 to 5 bytes each) and whichever form the event and batch take,
// so never more than 8 times the payload's bytes.
func TestDecodeTokensAllocationBounded(t *testing.T) {
	const n = 1 << 18
	const slack = 64 << 10
	for _, tok := range []int64{5, 200, 30000, 150000} {
		toks := make([]int64, n)
		for i := range toks {
			toks[i] = tok
		}
		b := Batch{Events: []Event{{Kind: BlockStored, Hashes: []uint64{1}, Tokens: toks, BlockSize: n}}}
		payloads := map[string][]byte{
			"map events":   FormatMap.AppendBatch(nil, &b),
			"array events": FormatArray.AppendBatch(nil, &b),
		}
		// The batch as a map: {"ts": 0.0, "events": [...]}.
		arr := payloads["map events"]
		mapped := append([]byte{0x82, 0xa2, 't', 's'}, arr[1:10]...) // ts
		mapped = append(append(mapped, 0xa6), "events"...)
		payloads["map batch"] = append(mapped, arr[10:len(arr)-1]...) // the events, no dp_rank
		for name, p := range payloads {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			got, err := DecodeBatch(p)
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatalf("token %d, %s: %v", tok, name, err)
			}
			if len(got.Events) != 1 || len(got.Events[0].Tokens) != n || got.Events[0].Tokens[n-1] != tok {
				t.Fatalf("token %d, %s: decoded the wrong tokens", tok, name)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			if alloc > 8*n+slack || alloc > 8*uint64(len(p))+slack {
				t.Errorf("token %d, %s: a payload of %d bytes with %d tokens allocated %d (%.1f bytes a token, %.1fx the payload)",
					tok, name, len(p), n, alloc, float64(alloc)/n, float64(alloc)/float64(len(p)))
			}
		}
	}
}
