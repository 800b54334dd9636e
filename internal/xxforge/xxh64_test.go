package xxforge

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func TestInverses(t *testing.T) {
	for _, c := range []struct{ p, inv uint64 }{{prime1, inv1}, {prime2, inv2}, {prime3, inv3}} {
		if c.p*c.inv != 1 {
			t.Fatalf("%#x * %#x = %#x, want 1", c.p, c.inv, c.p*c.inv)
		}
	}
}

func TestAvalancheRoundTrip(t *testing.T) {
	// The empty input hashes to avalanche(p5): ties Avalanche to the real library.
	if got, want := Avalanche(prime5), xxhash.Sum64(nil); got != want {
		t.Fatalf("Avalanche(p5) = %#x, xxhash.Sum64(nil) = %#x", got, want)
	}
	r := rand.New(rand.NewPCG(1, 2))
	xs := []uint64{0, 1, ^uint64(0), 1 << 63}
	for range 1000 {
		xs = append(xs, r.Uint64())
	}
	for _, x := range xs {
		if got := InvertAvalanche(Avalanche(x)); got != x {
			t.Fatalf("InvertAvalanche(Avalanche(%#x)) = %#x", x, got)
		}
		if got := Avalanche(InvertAvalanche(x)); got != x {
			t.Fatalf("Avalanche(InvertAvalanche(%#x)) = %#x", x, got)
		}
	}
}

func TestUnround(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		from, to, h := r.Uint64(), r.Uint64(), r.Uint64()
		if got := round(from, unround(from, to)); got != to {
			t.Fatalf("round(%#x, unround) = %#x, want %#x", from, got, to)
		}
		if got := tailRound(h, untailRound(h, to)); got != to {
			t.Fatalf("tailRound(%#x, untailRound) = %#x, want %#x", h, got, to)
		}
	}
}

// TestSum64WordsModel checks the package's model of xxh64 against the library
// for every word count around the stripe and tail boundaries.
func TestSum64WordsModel(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for n := range 70 {
		w := make([]uint64, n)
		b := make([]byte, 8*n)
		for i := range w {
			w[i] = r.Uint64()
			binary.LittleEndian.PutUint64(b[8*i:], w[i])
		}
		if got, want := Sum64Words(w), xxhash.Sum64(b); got != want {
			t.Fatalf("%d words: Sum64Words = %#x, xxhash.Sum64 = %#x", n, got, want)
		}
	}
}
