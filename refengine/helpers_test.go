package refengine

import (
	"math"
	"math/rand/v2"
	"testing"
)

// mustModel builds a model or fails the test.
func mustModel(t testing.TB, cfg Config) *Model {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return m
}

// mustRef returns Reference(tokens) or fails the test.
func mustRef(t testing.TB, m *Model, tokens []int64) [][]float32 {
	t.Helper()
	ref, err := m.Reference(tokens)
	if err != nil {
		t.Fatalf("Reference: %v", err)
	}
	return ref
}

// randTokens returns n token ids drawn from r.
func randTokens(r *rand.Rand, vocab, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = r.Int64N(int64(vocab))
	}
	return out
}

// requireSameBits fails unless got and want hold the same float32 bit
// patterns row by row; rows of got are compared against want[off:].
func requireSameBits(t testing.TB, what string, got, want [][]float32, off int) {
	t.Helper()
	if off+len(got) > len(want) {
		t.Fatalf("%s: %d rows at offset %d, reference has %d", what, len(got), off, len(want))
	}
	for i, row := range got {
		if !rowSameBits(row, want[off+i]) {
			t.Fatalf("%s: row %d (position %d) differs from the reference", what, i, off+i)
		}
	}
}

// rowSameBits reports whether two rows are bit-identical.
func rowSameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// flipKV wraps a store and flips one bit of one element of K or V as it is
// read at one (layer, pos), as a corrupted cache block would.
type flipKV struct {
	KVStore
	layer, pos int
	value      bool // flip in V instead of K
	idx        int  // element within the KVDim floats
	bit        uint // 0..31
	flips      int  // how many reads were corrupted
}

func (f *flipKV) ReadKV(layer, pos int, k, v []float32) error {
	if err := f.KVStore.ReadKV(layer, pos, k, v); err != nil {
		return err
	}
	if layer == f.layer && pos == f.pos {
		x := k
		if f.value {
			x = v
		}
		x[f.idx] = math.Float32frombits(math.Float32bits(x[f.idx]) ^ 1<<f.bit)
		f.flips++
	}
	return nil
}

// remapKV wraps a store and reads position from[i] when asked for
// position i (identity where from has no entry), as a block table with
// two entries swapped would.
type remapKV struct {
	KVStore
	from map[int]int
}

func (r remapKV) ReadKV(layer, pos int, k, v []float32) error {
	if p, ok := r.from[pos]; ok {
		pos = p
	}
	return r.KVStore.ReadKV(layer, pos, k, v)
}
