package xxforge

import (
	"errors"
	"slices"

	"github.com/kvtier/kvtier/prefixhash"
)

var (
	// ErrEmpty: there is no block to forge.
	ErrEmpty = errors.New("kvtier: xxforge: empty block")
	// ErrLength: the attacker's and the victim's blocks differ in length.
	ErrLength = errors.New("kvtier: xxforge: attacker and victim blocks differ in length")
	// ErrAligned: the hashed bytes are a whole number of 32-byte stripes, so the last
	// token sits in a lane rather than in a tail round, and no single word can be
	// solved for an arbitrary target (see the package doc). Use Collide against a
	// known victim block instead.
	ErrAligned = errors.New("kvtier: xxforge: hashed input is stripe-aligned; no closed-form preimage")
	// ErrSame: the forged block came out equal to the victim's, because the attacker
	// block agrees with it on every token the forgery keeps.
	ErrSame = errors.New("kvtier: xxforge: forged block equals the victim block")
)

// words returns the byte stream prefixhash.Hasher.Block hashes, as 8-byte words:
// prev (if hasPrev), then each token.
func words(prev prefixhash.Hash, hasPrev bool, tokens []int64) []uint64 {
	w := make([]uint64, 0, len(tokens)+1)
	if hasPrev {
		w = append(w, uint64(prev))
	}
	for _, t := range tokens {
		w = append(w, uint64(t))
	}
	return w
}

// aligned reports whether a stream of n words ends on a stripe boundary with no
// tail round: then the last word is folded into a lane.
func aligned(n int) bool { return n >= 4 && n%4 == 0 }

// Solvable reports whether ForgeBlock can reach an arbitrary target for blocks of
// blockTokens tokens in this chain position: true unless the hashed bytes,
// 8*(blockTokens+1) with a predecessor or 8*blockTokens without, are a non-zero
// multiple of 32. With a predecessor (every block after the first, and the first
// block of a salted chain) that excludes blockTokens ≡ 3 (mod 4); without one (the
// first block of an unsalted chain) blockTokens ≡ 0 (mod 4), which includes the
// usual 16.
func Solvable(hasPrev bool, blockTokens int) bool {
	n := blockTokens
	if hasPrev {
		n++
	}
	return blockTokens > 0 && !aligned(n)
}

// ForgeBlock returns a block of len(attacker) tokens whose prefixhash block hash,
// after predecessor prev (hasPrev false for the first block of an unsalted chain;
// for a salted chain's first block pass prefixhash.Seed(salt)), is target. It keeps
// attacker[:len-1] and solves the last token exactly; that token is an arbitrary
// int64, usually negative or far outside any vocabulary. The result is a fresh
// slice; attacker is not modified.
//
// It fails with ErrAligned when !Solvable(hasPrev, len(attacker)), and with
// ErrEmpty for an empty block. The result equals the block that produced target
// exactly when attacker agrees with that block on all but its last token.
func ForgeBlock(prev prefixhash.Hash, hasPrev bool, attacker []int64, target prefixhash.Hash) ([]int64, error) {
	if len(attacker) == 0 {
		return nil, ErrEmpty
	}
	if !Solvable(hasPrev, len(attacker)) {
		return nil, ErrAligned
	}
	w := words(prev, hasPrev, attacker)
	h := accumulate(w, 1) // the accumulator before the last tail round
	last := untailRound(h, InvertAvalanche(uint64(target)))
	out := slices.Clone(attacker)
	out[len(out)-1] = int64(last)
	return out, nil
}

// Collide returns a block of len(attacker) tokens, different from victim, with the
// same prefixhash block hash as victim after the same predecessor (prev, hasPrev as
// for ForgeBlock). It works in every chain position except a lone stripe (4 tokens
// without a predecessor, 3 with one).
//
// When Solvable, it is ForgeBlock aimed at the victim's hash: the attacker's tokens
// but the last are kept. Otherwise it matches the four lane accumulators instead of
// the hash: it keeps attacker[:len-4] and solves the last four tokens so that each
// lane ends where the victim's does, after which the two inputs are identical to
// xxh64. The solved tokens are arbitrary int64s.
//
// It fails with ErrLength, ErrEmpty, ErrAligned (the lone stripe), or ErrSame when
// the attacker agrees with the victim on every kept token (always for a one-token
// block, whose only preimage is the victim). Neither input is
// modified.
func Collide(prev prefixhash.Hash, hasPrev bool, victim, attacker []int64) ([]int64, error) {
	if len(attacker) != len(victim) {
		return nil, ErrLength
	}
	if len(attacker) == 0 {
		return nil, ErrEmpty
	}
	var out []int64
	if Solvable(hasPrev, len(attacker)) {
		var h prefixhash.Hasher
		var err error
		out, err = ForgeBlock(prev, hasPrev, attacker, h.Block(prev, hasPrev, victim))
		if err != nil {
			return nil, err
		}
	} else {
		vw := words(prev, hasPrev, victim)
		aw := words(prev, hasPrev, attacker)
		if len(aw) == 4 {
			return nil, ErrAligned
		}
		want := lanes(vw)
		have := lanes(aw[:len(aw)-4]) // the lanes before the last stripe
		out = slices.Clone(attacker)
		for j := range 4 {
			out[len(out)-4+j] = int64(unround(have[j], want[j]))
		}
	}
	if slices.Equal(out, victim) {
		return nil, ErrSame
	}
	return out, nil
}
