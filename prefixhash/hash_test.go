package prefixhash

import (
	"encoding/json"
	"os"
	"strconv"
	"testing"
)

type vectorFile struct {
	Cases []struct {
		BlockSize int      `json:"block_size"`
		TokenIDs  []int64  `json:"token_ids"`
		Hashes    []string `json:"chained_hashes"`
	} `json:"cases"`
}

// TestNanoVLLMVectors proves the byte layout matches nano-vllm's compute_hash.
func TestNanoVLLMVectors(t *testing.T) {
	raw, err := os.ReadFile("../testdata/nanovllm_hash_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vf vectorFile
	if err := json.Unmarshal(raw, &vf); err != nil {
		t.Fatal(err)
	}
	if len(vf.Cases) == 0 {
		t.Fatal("no vectors")
	}
	var h Hasher
	for i, c := range vf.Cases {
		got := h.Chain(nil, "", c.TokenIDs, c.BlockSize)
		if len(got) != len(c.Hashes) {
			t.Fatalf("case %d: %d hashes, want %d", i, len(got), len(c.Hashes))
		}
		for j, want := range c.Hashes {
			w, err := strconv.ParseUint(want, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			if uint64(got[j]) != w {
				t.Fatalf("case %d block %d: %d, want %d", i, j, got[j], w)
			}
		}
	}
}

func TestChainProperty(t *testing.T) {
	var h Hasher
	a := h.Chain(nil, "", []int64{1, 2, 3, 4, 9, 9, 9, 9}, 4)
	b := h.Chain(nil, "", []int64{5, 6, 7, 8, 9, 9, 9, 9}, 4)
	if a[1] == b[1] {
		t.Fatal("equal second blocks after different first blocks hashed equal")
	}
	c := h.Chain(nil, "", []int64{1, 2, 3, 4, 9, 9, 9, 9, 7}, 4)
	if len(c) != 2 || c[0] != a[0] || c[1] != a[1] {
		t.Fatalf("a partial tail changed the chain or got a hash: %v vs %v", c, a)
	}
}

func TestSalt(t *testing.T) {
	var h Hasher
	toks := []int64{1, 2, 3, 4, 5, 6, 7, 8}
	plain := h.Chain(nil, "", toks, 4)
	a := h.Chain(nil, "tenant-a", toks, 4)
	b := h.Chain(nil, "tenant-b", toks, 4)
	for i := range plain {
		if a[i] == plain[i] || a[i] == b[i] || b[i] == plain[i] {
			t.Fatalf("block %d: salts did not separate the chains", i)
		}
	}
	if again := h.Chain(nil, "tenant-a", toks, 4); again[1] != a[1] {
		t.Fatal("salted chain not deterministic")
	}
	if _, ok := Seed(""); ok {
		t.Fatal("empty salt must give no seed")
	}
}

func TestTokensAreEightBytes(t *testing.T) {
	var h Hasher
	// 1<<32+5 and 5 agree in their low 4 bytes: a 4-byte encoding would collide.
	if h.Block(0, false, []int64{1<<32 + 5}) == h.Block(0, false, []int64{5}) {
		t.Fatal("high bytes of a token id were dropped")
	}
}

func BenchmarkChain(b *testing.B) {
	for _, bs := range []int{16, 512} {
		toks := make([]int64, bs*32)
		for i := range toks {
			toks[i] = int64(i * 7)
		}
		b.Run("block_tokens="+strconv.Itoa(bs), func(b *testing.B) {
			var h Hasher
			dst := make([]Hash, 0, 32)
			b.ReportAllocs()
			b.SetBytes(int64(8 * len(toks)))
			for b.Loop() {
				dst = h.Chain(dst[:0], "", toks, bs)
			}
		})
	}
}
