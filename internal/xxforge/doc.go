// Package xxforge forges prefixhash collisions, for kvtier's security tests. It
// shows that the unkeyed, nano-vllm-compatible prefix hash is no defence against a
// tenant who wants another tenant's prompt to hit a poisoned block: given a target
// block hash and its chain context, it builds a different block with that hash.
//
// # What is hashed
//
// prefixhash.Hasher.Block hashes, with xxh64 and seed 0, the stream of 8-byte
// little-endian words prev, t0, t1, ..., t(T-1), where prev (the predecessor's hash,
// or prefixhash.Seed(salt) for a salted chain's first block) is absent only for the
// first block of an unsalted chain. Call the word count N (T+1 or T). xxh64 then
//
//   - runs four lanes over the N/4 full 32-byte stripes, v = rotl(v + w·p2, 31)·p1,
//     and converges them into one accumulator h (only if N ≥ 4; else h = p5);
//   - adds the length, h += 8N;
//   - folds each of the N mod 4 leftover words in a tail round,
//     h = rotl(h ^ rotl(w·p2, 31)·p1, 27)·p1 + p4;
//   - returns avalanche(h).
//
// # Preimages (ForgeBlock)
//
// Every step of the avalanche is a bijection (x ^= x>>s undoes as
// x ^ x>>s ^ x>>2s ...; p2 and p3 are odd, so invertible mod 2^64):
// InvertAvalanche turns the target into the accumulator h' wanted after the last
// tail round. When N mod 4 ≠ 0 the last word, which is always the last token, is
// folded in a tail round, and for a fixed accumulator h before it the round is a
// bijection of the word: w = rotl((rotr((h'-p4)·p1⁻¹, 27) ^ h)·p1⁻¹, 33)·p2⁻¹.
// So ForgeBlock keeps the attacker's tokens but the last, computes h from them,
// and solves the last token exactly, in constant time.
//
// # The stripe-aligned case (Collide)
//
// When N is a multiple of 4 (a 16-token first block of an unsalted chain, or any
// 15-token block with a predecessor) there is no tail round: the last token lands in
// lane 4 and reaches h twice, through rotl(v4, 18) in the converged sum and through
// merge(h, v4) at its end, and the same holds for every lane. No single word then
// solves in closed form, and a generic search costs about 2^32 work per target, so
// ForgeBlock reports ErrAligned. Collide covers that case for a known victim block
// instead: each lane update is a bijection of its word, w = (rotr(v'·p1⁻¹, 31) -
// v)·p2⁻¹, so solving the last stripe's four tokens brings every lane to the
// victim's value, and the rest of xxh64 sees identical state. That needs a stripe
// before the last one (N ≥ 8) for the blocks to differ.
//
// # Limits
//
// Solved tokens are arbitrary int64 values: negative or far beyond any vocabulary,
// so a server that validates token ids against its vocabulary rejects them before
// hashing. Forging in-vocabulary blocks needs a search over many bounded words and
// is not provided. The package knows xxh64 only for inputs that are a whole number
// of 8-byte words, which is all prefixhash ever hashes.
//
// # Usage
//
//	prev, hasPrev := prefixhash.Seed("tenant-a") // first block of a salted chain
//	forged, err := xxforge.ForgeBlock(prev, hasPrev, attackerTokens, victimHash)
//	// h.Block(prev, hasPrev, forged) == victimHash
package xxforge
