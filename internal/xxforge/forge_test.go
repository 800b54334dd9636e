package xxforge

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvtier/kvtier/prefixhash"
)

func randTokens(r *rand.Rand, n int) []int64 {
	t := make([]int64, n)
	for i := range t {
		t[i] = int64(r.IntN(32000)) // a plausible vocabulary
	}
	return t
}

// TestForgeBlock forges random targets and checks them with the real hasher.
func TestForgeBlock(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, size := range []int{1, 2, 3, 4, 5, 7, 15, 16, 17, 512, 513} {
		for _, hasPrev := range []bool{false, true} {
			t.Run(fmt.Sprintf("tokens=%d/prev=%v", size, hasPrev), func(t *testing.T) {
				var h prefixhash.Hasher
				for range 20 {
					prev := prefixhash.Hash(r.Uint64())
					target := prefixhash.Hash(r.Uint64())
					attacker := randTokens(r, size)
					keep := slices.Clone(attacker)
					forged, err := ForgeBlock(prev, hasPrev, attacker, target)
					if !Solvable(hasPrev, size) {
						if !errors.Is(err, ErrAligned) {
							t.Fatalf("aligned block: err = %v, want ErrAligned", err)
						}
						return
					}
					if err != nil {
						t.Fatal(err)
					}
					if got := h.Block(prev, hasPrev, forged); got != target {
						t.Fatalf("forged block hashes to %#x, want %#x", got, target)
					}
					if len(forged) != size || !slices.Equal(forged[:size-1], attacker[:size-1]) {
						t.Fatal("forgery changed more than the last token")
					}
					if !slices.Equal(attacker, keep) {
						t.Fatal("attacker block modified")
					}
				}
			})
		}
	}
}

func TestSolvable(t *testing.T) {
	for _, c := range []struct {
		hasPrev bool
		tokens  int
		want    bool
	}{
		{false, 0, false}, {true, 0, false},
		{false, 3, true}, {false, 4, false}, {false, 16, false}, {false, 17, true}, {false, 512, false},
		{true, 3, false}, {true, 4, true}, {true, 15, false}, {true, 16, true}, {true, 512, true},
	} {
		if got := Solvable(c.hasPrev, c.tokens); got != c.want {
			t.Errorf("Solvable(%v, %d) = %v, want %v", c.hasPrev, c.tokens, got, c.want)
		}
	}
}

// TestCollide forges a second block for random victims in every position the
// package supports, including the stripe-aligned first block.
func TestCollide(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, size := range []int{1, 3, 4, 7, 8, 15, 16, 512} {
		for _, hasPrev := range []bool{false, true} {
			t.Run(fmt.Sprintf("tokens=%d/prev=%v", size, hasPrev), func(t *testing.T) {
				var h prefixhash.Hasher
				for range 20 {
					prev := prefixhash.Hash(r.Uint64())
					victim := randTokens(r, size)
					attacker := randTokens(r, size)
					v, a := slices.Clone(victim), slices.Clone(attacker)
					forged, err := Collide(prev, hasPrev, victim, attacker)
					words := size
					if hasPrev {
						words++
					}
					if words == 4 {
						if !errors.Is(err, ErrAligned) {
							t.Fatalf("lone stripe: err = %v, want ErrAligned", err)
						}
						return
					}
					if size == 1 {
						// The one token is solved: its only preimage is the victim's.
						if !errors.Is(err, ErrSame) {
							t.Fatalf("one-token block: err = %v, want ErrSame", err)
						}
						return
					}
					if err != nil {
						t.Fatal(err)
					}
					if slices.Equal(forged, victim) {
						t.Fatal("forged block equals the victim")
					}
					if got, want := h.Block(prev, hasPrev, forged), h.Block(prev, hasPrev, victim); got != want {
						t.Fatalf("forged block hashes to %#x, victim to %#x", got, want)
					}
					if !slices.Equal(victim, v) || !slices.Equal(attacker, a) {
						t.Fatal("inputs modified")
					}
				}
			})
		}
	}
}

func TestCollideErrors(t *testing.T) {
	victim := make([]int64, 16)
	for i := range victim {
		victim[i] = int64(i)
	}
	if _, err := Collide(0, false, victim, victim[:8]); !errors.Is(err, ErrLength) {
		t.Fatalf("err = %v, want ErrLength", err)
	}
	if _, err := Collide(0, false, nil, nil); !errors.Is(err, ErrEmpty) {
		t.Fatalf("err = %v, want ErrEmpty", err)
	}
	if _, err := ForgeBlock(0, true, nil, 1); !errors.Is(err, ErrEmpty) {
		t.Fatalf("err = %v, want ErrEmpty", err)
	}
	// Agreeing with the victim on every kept token leaves only the victim.
	for _, hasPrev := range []bool{false, true} {
		attacker := slices.Clone(victim)
		attacker[15] = 99
		if _, err := Collide(5, hasPrev, victim, attacker); !errors.Is(err, ErrSame) {
			t.Fatalf("prev=%v: err = %v, want ErrSame", hasPrev, err)
		}
	}
}

// TestPoisonChain forges a whole multi-block sequence, block by block, whose chained
// hashes equal the victim's, for an unsalted and a salted chain: what a poisoning
// tenant would submit.
func TestPoisonChain(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, bs := range []int{16, 512} {
		for _, salt := range []string{"", "tenant-a"} {
			t.Run(fmt.Sprintf("block_tokens=%d/salt=%q", bs, salt), func(t *testing.T) {
				var h prefixhash.Hasher
				victim := randTokens(r, 4*bs)
				want := h.Chain(nil, salt, victim, bs)
				prev, hasPrev := prefixhash.Seed(salt)
				var forged []int64
				for i := range want {
					vb := victim[i*bs : (i+1)*bs]
					attacker := randTokens(r, bs)
					var fb []int64
					var err error
					if Solvable(hasPrev, bs) {
						fb, err = ForgeBlock(prev, hasPrev, attacker, want[i])
					} else {
						fb, err = Collide(prev, hasPrev, vb, attacker)
					}
					if err != nil {
						t.Fatalf("block %d: %v", i, err)
					}
					if slices.Equal(fb, vb) {
						t.Fatalf("block %d: forged block equals the victim's", i)
					}
					forged = append(forged, fb...)
					prev, hasPrev = want[i], true
				}
				if got := h.Chain(nil, salt, forged, bs); !slices.Equal(got, want) {
					t.Fatalf("forged chain %v, want %v", got, want)
				}
			})
		}
	}
}
