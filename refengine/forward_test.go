package refengine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// mhaConfig is TinyConfig without grouped-query attention and with three
// layers, so both head mappings are exercised.
var mhaConfig = Config{Vocab: 97, DModel: 24, Layers: 3, Heads: 3, KVHeads: 3, MLPHidden: 40, Seed: 7}

// randomChunks splits n positions into consecutive chunks of random
// lengths (at least one position each).
func randomChunks(r *rand.Rand, n int) []int {
	var sizes []int
	for n > 0 {
		c := 1 + r.IntN(n)
		if r.IntN(3) == 0 {
			c = 1 // decode-like steps are the common case
		}
		sizes = append(sizes, c)
		n -= c
	}
	return sizes
}

// TestChunkedForwardMatchesReference is the property the package exists
// for: however a sequence is split into Forward calls over one store, each
// position's logits are bit-identical to the no-cache Reference.
func TestChunkedForwardMatchesReference(t *testing.T) {
	for _, cfg := range []Config{TinyConfig, mhaConfig} {
		t.Run(fmt.Sprintf("kv_heads=%d", cfg.KVHeads), func(t *testing.T) {
			m := mustModel(t, cfg)
			r := rand.New(rand.NewPCG(1, 2))
			for trial := range 40 {
				tokens := randTokens(r, cfg.Vocab, 1+r.IntN(24))
				ref := mustRef(t, m, tokens)
				kv := m.NewMemKV()
				start := 0
				for _, size := range randomChunks(r, len(tokens)) {
					got, err := m.Forward(kv, tokens[start:start+size], start)
					if err != nil {
						t.Fatalf("trial %d: Forward(start=%d, n=%d): %v", trial, start, size, err)
					}
					requireSameBits(t, fmt.Sprintf("trial %d chunk at %d", trial, start), got, ref, start)
					start += size
				}
				if kv.Len() != len(tokens) {
					t.Fatalf("trial %d: store holds %d positions, want %d", trial, kv.Len(), len(tokens))
				}
			}
		})
	}
}

// TestForwardFromPrefilledStore continues a sequence at start > 0 over a
// MemKV filled by an earlier Forward, and forks one prefix into two
// sequences with Clone, as a prefix cache hit would.
func TestForwardFromPrefilledStore(t *testing.T) {
	m := mustModel(t, TinyConfig)
	r := rand.New(rand.NewPCG(3, 4))
	prefix := randTokens(r, TinyConfig.Vocab, 11)
	prefixKV := m.NewMemKV()
	if _, err := m.Forward(prefixKV, prefix, 0); err != nil {
		t.Fatal(err)
	}
	for fork := range 3 {
		suffix := randTokens(r, TinyConfig.Vocab, 1+fork*3)
		full := append(append([]int64(nil), prefix...), suffix...)
		ref := mustRef(t, m, full)
		kv := prefixKV.Clone()
		got, err := m.Forward(kv, suffix, len(prefix))
		if err != nil {
			t.Fatal(err)
		}
		requireSameBits(t, fmt.Sprintf("fork %d", fork), got, ref, len(prefix))

		last, err := m.ForwardLast(prefixKV.Clone(), suffix, len(prefix))
		if err != nil {
			t.Fatal(err)
		}
		requireSameBits(t, "ForwardLast", [][]float32{last}, ref, len(full)-1)
	}
	if prefixKV.Len() != len(prefix) {
		t.Fatalf("forks wrote into the shared prefix store: Len %d, want %d", prefixKV.Len(), len(prefix))
	}
}

// TestRecomputeAfterTruncate rolls a store back and recomputes a different
// continuation over the same positions, as a rejected speculative draft
// would.
func TestRecomputeAfterTruncate(t *testing.T) {
	m := mustModel(t, TinyConfig)
	kv := m.NewMemKV()
	a := []int64{1, 2, 3, 4, 5, 6}
	b := []int64{1, 2, 3, 9, 9}
	if _, err := m.Forward(kv, a, 0); err != nil {
		t.Fatal(err)
	}
	kv.Truncate(3)
	got, err := m.Forward(kv, b[3:], 3)
	if err != nil {
		t.Fatal(err)
	}
	requireSameBits(t, "after truncate", got, mustRef(t, m, b), 3)
	var ke *KVError
	if _, err := m.Forward(kv, []int64{1}, 6); !errors.As(err, &ke) || !errors.Is(err, ErrNotWritten) || ke.Pos != 5 {
		t.Fatalf("Forward past a truncated position = %v, want a *KVError at pos 5 wrapping ErrNotWritten", err)
	}
}

// TestCorruptKVChangesLogits proves the cached K and V are used: flipping
// one bit of one float of K or V, of any layer at any earlier position,
// changes the logits of the last token. Without it, the identity tests
// above would also pass for a model that ignored the store.
func TestCorruptKVChangesLogits(t *testing.T) {
	m := mustModel(t, TinyConfig)
	r := rand.New(rand.NewPCG(5, 6))
	tokens := randTokens(r, TinyConfig.Vocab, 8)
	ref := mustRef(t, m, tokens)
	last := len(tokens) - 1
	prefill := m.NewMemKV()
	if _, err := m.Forward(prefill, tokens[:last], 0); err != nil {
		t.Fatal(err)
	}
	// Control: the same read path with nothing flipped matches, so a
	// difference below is the flip's doing.
	control := &flipKV{KVStore: prefill.Clone(), layer: -1}
	got, err := m.ForwardLast(control, tokens[last:], last)
	if err != nil {
		t.Fatal(err)
	}
	requireSameBits(t, "uncorrupted control", [][]float32{got}, ref, last)
	for layer := range TinyConfig.Layers {
		for pos := range last {
			for _, value := range []bool{false, true} {
				f := &flipKV{KVStore: prefill.Clone(), layer: layer, pos: pos, value: value,
					idx: r.IntN(m.KVDim()), bit: 22} // the top mantissa bit
				got, err := m.ForwardLast(f, tokens[last:], last)
				if err != nil {
					t.Fatal(err)
				}
				if f.flips != 1 {
					t.Fatalf("layer %d pos %d: %d corrupted reads, want 1", layer, pos, f.flips)
				}
				if rowSameBits(got, ref[last]) {
					t.Errorf("layer %d pos %d value=%v: corrupting the cache left the logits unchanged", layer, pos, value)
				}
			}
		}
	}
}

// TestCorruptStoredKVChangesLogits corrupts the stored bytes themselves
// (not a read) after the prefill: a Forward at start > 0 must read them,
// never recompute them.
func TestCorruptStoredKVChangesLogits(t *testing.T) {
	m := mustModel(t, TinyConfig)
	tokens := []int64{10, 20, 30, 40, 50}
	ref := mustRef(t, m, tokens)
	kv := m.NewMemKV()
	if _, err := m.Forward(kv, tokens[:4], 0); err != nil {
		t.Fatal(err)
	}
	control, err := m.ForwardLast(kv.Clone(), tokens[4:], 4)
	if err != nil {
		t.Fatal(err)
	}
	requireSameBits(t, "uncorrupted control", [][]float32{control}, ref, 4)
	kv.v[1][2*m.KVDim()+3] += 0.5 // layer 1, position 2, element 3
	got, err := m.ForwardLast(kv, tokens[4:], 4)
	if err != nil {
		t.Fatal(err)
	}
	if rowSameBits(got, ref[4]) {
		t.Fatal("a corrupted stored V left the logits unchanged: the cache was not used")
	}
}

// TestRoPEPositionMatters checks that keys are only valid at the position
// they were computed for: the model is not permutation invariant, and K/V
// served from the wrong position (shifted or swapped, as a wrong block
// table entry would) changes the logits.
func TestRoPEPositionMatters(t *testing.T) {
	m := mustModel(t, TinyConfig)
	tokens := []int64{7, 7, 7, 3, 8, 1}
	ref := mustRef(t, m, tokens)
	last := len(tokens) - 1

	// Control for the subtests below: the remapping store with an empty map
	// serves every position from itself and matches the reference.
	t.Run("control", func(t *testing.T) {
		kv := m.NewMemKV()
		if _, err := m.Forward(kv, tokens[:last], 0); err != nil {
			t.Fatal(err)
		}
		got, err := m.ForwardLast(remapKV{KVStore: kv}, tokens[last:], last)
		if err != nil {
			t.Fatal(err)
		}
		requireSameBits(t, "identity remap", [][]float32{got}, ref, last)
	})

	t.Run("swapped prompt tokens", func(t *testing.T) {
		swapped := []int64{3, 7, 7, 7, 8, 1}
		if rowSameBits(mustRef(t, m, swapped)[last], ref[last]) {
			t.Fatal("swapping two prompt tokens left the last logits unchanged")
		}
	})

	t.Run("prefix computed one position late", func(t *testing.T) {
		// Positions 1..last hold the prefix, so each K carries the
		// rotation of the position after its own; move them down by one.
		late := m.NewMemKV()
		if _, err := m.Forward(late, append([]int64{0}, tokens[:last]...), 0); err != nil {
			t.Fatal(err)
		}
		shifted := remapKV{KVStore: late, from: map[int]int{}}
		for p := range last {
			shifted.from[p] = p + 1
		}
		// The last token is written at position last (the from map is
		// identity there), so only the prefix is misplaced.
		got, err := m.ForwardLast(shifted, tokens[last:], last)
		if err != nil {
			t.Fatal(err)
		}
		if rowSameBits(got, ref[last]) {
			t.Fatal("a prefix roped one position late left the logits unchanged")
		}
	})

	t.Run("two positions swapped", func(t *testing.T) {
		kv := m.NewMemKV()
		if _, err := m.Forward(kv, tokens[:last], 0); err != nil {
			t.Fatal(err)
		}
		// Positions 1 and 2 hold the same token, so only the rotation
		// tells them apart.
		got, err := m.ForwardLast(remapKV{KVStore: kv, from: map[int]int{1: 2, 2: 1}}, tokens[last:], last)
		if err != nil {
			t.Fatal(err)
		}
		if rowSameBits(got, ref[last]) {
			t.Fatal("swapping the K/V of two positions of the same token left the logits unchanged")
		}
	})
}

// FuzzChunkedForward drives the chunking property with arbitrary token
// sequences and split points.
func FuzzChunkedForward(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8}, []byte{3, 1, 4})
	f.Add([]byte{0}, []byte{})
	f.Add([]byte{9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9}, []byte{1, 1, 1, 1, 1, 1, 1, 1})
	m := mustModel(f, TinyConfig)
	f.Fuzz(func(t *testing.T, data, splits []byte) {
		if len(data) == 0 || len(data) > 32 {
			t.Skip()
		}
		tokens := make([]int64, len(data))
		for i, b := range data {
			tokens[i] = int64(b) % int64(TinyConfig.Vocab)
		}
		ref := mustRef(t, m, tokens)
		kv := m.NewMemKV()
		for start, i := 0, 0; start < len(tokens); i++ {
			size := len(tokens) - start
			if i < len(splits) {
				size = min(size, 1+int(splits[i])%size)
			}
			got, err := m.Forward(kv, tokens[start:start+size], start)
			if err != nil {
				t.Fatal(err)
			}
			requireSameBits(t, "fuzz", got, ref, start)
			start += size
		}
	})
}
