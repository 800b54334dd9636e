package policy

import (
	"math"
	"math/bits"
)

// Hint is what a tier knows about a block when it admits or touches it,
// beyond its key. The zero Hint says nothing: a root block, full.
type Hint struct {
	// Depth is the block's position in its request's chain of blocks: 0 for
	// the first block, n for the block after n others. A prefix is only
	// useful from its root, so a policy that reads hints evicts the deeper
	// blocks of one request first.
	Depth int
	// Partial marks a block that holds fewer tokens than a full block: the
	// last block of a prompt whose length is not a multiple of the block
	// size. The next turn of a conversation extends the prompt, so such a
	// block is rarely asked for again; only an identical prompt hits it.
	Partial bool
	// Class is the class of the request that brought the block in (0:
	// unknown), such as OutputClass of its output length. A policy that
	// reads it (Adaptive) learns online how often a block first seen in a
	// request of each class is used again, and a candidate ranking with
	// Candidate.Class evicts first, with partial blocks, the blocks seen
	// once of a class that rarely comes back. A block's class is that of
	// its first touch.
	Class uint8
}

// OutputClass is the Hint.Class kvtier's simulations (cachesim, kvbench's
// trace suite) give a request's blocks: its output length in tokens,
// bucketed by powers of two (1 for no output, 2 for one token, 3 for two or
// three, k+1 for 2^(k-1) to 2^k - 1). An engine knows a request's output
// length when it finishes, before its blocks can be evicted (a running
// sequence holds them). On Mooncake's synthetic trace (document questions
// beside generation tasks) the blocks first seen in requests answering in
// 2 to 31 tokens are used again 76–84% of the time, in 32 to 127 tokens
// 28–56%, in 128 or more 1–7%; on its conversation trace 17–36% in every
// class, none below half of the whole trace's share (`KVTIER_CACHESIM_REPORT=1
// go test -run TestReportClassReuse -v ./cachesim`).
func OutputClass(tokens int) uint8 {
	return uint8(min(1+bits.Len(uint(max(tokens, 0))), math.MaxUint8))
}

// Hinted is implemented by policies that use Hints (Adaptive). A tier that
// knows a block's chain position calls AddHint and AccessHint in place of
// Add and Access; callers that know nothing keep calling Add and Access,
// which mean the zero Hint. Policies that ignore hints do not implement it:
// test with a type assertion.
type Hinted interface {
	Policy
	// AddHint is Add with what the tier knows about k.
	AddHint(k Key, h Hint)
	// AccessHint is Access with what the tier knows about k.
	AccessHint(k Key, h Hint)
}

// AddClass adds k, a block of a request of class class (Hint.Class; 0
// unknown), to p: with that class as its Hint when p reads hints (Hinted)
// and class is not 0, plainly otherwise. It reports whether the class
// reached p. The tiers below the GPU add the blocks that land in them so.
func AddClass(p Policy, k Key, class uint8) bool {
	if h, ok := p.(Hinted); ok && class != 0 {
		h.AddHint(k, Hint{Class: class})
		return true
	}
	p.Add(k)
	return false
}

// MissObserver is implemented by policies that learn from requests for keys
// the tier does not hold (Adaptive). A tier under another sees only part of
// what is asked of it: hits come to it as reads, but a block it lacks is
// computed above and arrives much later, when the tier above lets it go. A
// policy that scores itself on what it sees then scores only what it already
// holds. A tier that hears of those misses (the prefix index does) passes
// them on with Miss; Add of a key Miss counted is its arrival, not a second
// use, and a key Miss saw first takes its class (Hint.Class) from its
// arrival.
type MissObserver interface {
	Policy
	// Miss records that k was asked for while not resident; a resident k
	// is ignored.
	Miss(k Key)
}
