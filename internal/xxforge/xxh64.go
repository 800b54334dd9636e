package xxforge

import "math/bits"

// The xxh64 primes. Variables, not constants, so that the wrapping arithmetic below
// (prime1 + prime2, -prime1) compiles.
var (
	prime1 uint64 = 0x9E3779B185EBCA87
	prime2 uint64 = 0xC2B2AE3D27D4EB4F
	prime3 uint64 = 0x165667B19E3779F9
	prime4 uint64 = 0x85EBCA77C2B2AE63
	prime5 uint64 = 0x27D4EB2F165667C5
)

// Inverses modulo 2^64 of the odd primes the forgery has to undo.
var (
	inv1 = inverse(prime1)
	inv2 = inverse(prime2)
	inv3 = inverse(prime3)
)

// inverse returns x with a*x == 1 mod 2^64; a must be odd. Newton's iteration
// x' = x(2 - ax) doubles the number of correct low bits; x = a is right to 3 bits,
// so five steps reach 96.
func inverse(a uint64) uint64 {
	if a&1 == 0 {
		panic("kvtier: xxforge: inverse of an even number")
	}
	x := a
	for range 5 {
		x *= 2 - a*x
	}
	return x
}

// round is xxh64's lane update: acc = rotl(acc + w*prime2, 31) * prime1.
func round(acc, w uint64) uint64 {
	return bits.RotateLeft64(acc+w*prime2, 31) * prime1
}

// unround returns the word w with round(from, w) == to: every step of round is a
// bijection in w (add, rotate, multiply by an odd number).
func unround(from, to uint64) uint64 {
	return (bits.RotateLeft64(to*inv1, -31) - from) * inv2
}

// mergeRound folds one lane into the converged accumulator.
func mergeRound(h, lane uint64) uint64 {
	return (h^round(0, lane))*prime1 + prime4
}

// tailRound consumes one 8-byte word left over after the 32-byte stripes.
func tailRound(h, w uint64) uint64 {
	return bits.RotateLeft64(h^round(0, w), 27)*prime1 + prime4
}

// untailRound returns the word w with tailRound(h, w) == to.
func untailRound(h, to uint64) uint64 {
	k := bits.RotateLeft64((to-prime4)*inv1, -27) ^ h
	return unround(0, k)
}

// lanes runs the four lane accumulators over the full 32-byte stripes of words
// (a trailing partial stripe is ignored).
func lanes(words []uint64) [4]uint64 {
	v := [4]uint64{prime1 + prime2, prime2, 0, -prime1}
	for i := 0; i+4 <= len(words); i += 4 {
		for j := range v {
			v[j] = round(v[j], words[i+j])
		}
	}
	return v
}

// accumulate returns xxh64's (seed 0) accumulator over a stream of 8-byte words,
// before the avalanche and before the last skip tail rounds. The length term
// always counts every word.
func accumulate(words []uint64, skip int) uint64 {
	n := len(words)
	var h uint64
	i := 0
	if n >= 4 {
		v := lanes(words)
		h = bits.RotateLeft64(v[0], 1) + bits.RotateLeft64(v[1], 7) +
			bits.RotateLeft64(v[2], 12) + bits.RotateLeft64(v[3], 18)
		for _, l := range v {
			h = mergeRound(h, l)
		}
		i = n &^ 3
	} else {
		h = prime5
	}
	h += uint64(8 * n)
	for ; i < n-skip; i++ {
		h = tailRound(h, words[i])
	}
	return h
}

// Sum64Words is xxh64 with seed 0 over words, each written as 8 bytes
// little-endian: a model of xxhash.Sum64 for inputs whose length is a multiple of
// 8, as prefixhash's always is.
func Sum64Words(words []uint64) uint64 {
	return Avalanche(accumulate(words, 0))
}

// Avalanche is xxh64's final mix. It is a bijection of uint64.
func Avalanche(h uint64) uint64 {
	h ^= h >> 33
	h *= prime2
	h ^= h >> 29
	h *= prime3
	h ^= h >> 32
	return h
}

// InvertAvalanche returns the h with Avalanche(h) == x.
func InvertAvalanche(x uint64) uint64 {
	x = unxorshift(x, 32)
	x *= inv3
	x = unxorshift(x, 29)
	x *= inv2
	return unxorshift(x, 33)
}

// unxorshift inverts y = x ^ x>>s: x = y ^ y>>s ^ y>>2s ^ ..., since the terms
// telescope; the loop stops once a shift clears every bit.
func unxorshift(y uint64, s uint) uint64 {
	x := y
	for k := s; k < 64; k += s {
		x ^= y >> k
	}
	return x
}
