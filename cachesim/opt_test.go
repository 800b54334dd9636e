package cachesim

import (
	"errors"
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/kvtier/kvtier/policy"
	"github.com/kvtier/kvtier/trace"
)

// bruteForceBest tries every eviction choice: the state after a request is any
// set of at most capacity ids taken from the previous state and the request's
// ids. It returns the most prefix hits any choice gets. Ids must be < 16.
func bruteForceBest(tr []trace.Request, capacity int) int64 {
	best := map[uint16]int64{0: 0}
	for _, r := range tr {
		var mask uint16
		for _, id := range r.HashIDs {
			mask |= 1 << id
		}
		next := make(map[uint16]int64)
		for s, v := range best {
			hits := int64(0)
			for _, id := range r.HashIDs {
				if s&(1<<id) == 0 {
					break
				}
				hits++
			}
			u := s | mask
			// Every subset of u, including u itself and the empty set.
			for t := u; ; t = (t - 1) & u {
				if bits.OnesCount16(t) <= capacity {
					if old, ok := next[t]; !ok || v+hits > old {
						next[t] = v + hits
					}
				}
				if t == 0 {
					break
				}
			}
		}
		best = next
	}
	var m int64
	for _, v := range best {
		m = max(m, v)
	}
	return m
}

// TestOPTIsOptimal checks OPT against an exhaustive search over every eviction
// choice on small random chained traces.
func TestOPTIsOptimal(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 300 {
		tr := randomChained(rng, 2+rng.IntN(7), 9, 4)
		if err := CheckChained(tr); err != nil {
			t.Fatal(err)
		}
		capacity := 1 + rng.IntN(4)
		got := OPT(tr, capacity)
		if want := bruteForceBest(tr, capacity); got.Hits != want {
			t.Fatalf("trial %d capacity %d: OPT %d hits, best possible %d\ntrace %v", trial, capacity, got.Hits, want, tr)
		}
	}
}

// TestOPTBoundsPolicies: on the embedded sample and a synthetic trace, OPT is
// at least every policy in either touch order and at most the infinite cache;
// LRU and OPT do not lose hits when the capacity grows.
func TestOPTBoundsPolicies(t *testing.T) {
	cfg := trace.DefaultSyntheticConfig()
	cfg.Sessions = 300
	syn, err := trace.Synthetic(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, tr := range map[string][]trace.Request{"sample": trace.Sample(), "synthetic": syn} {
		if err := CheckChained(tr); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		inf := Infinite(tr)
		var lastLRU, lastOPT int64
		for _, c := range []int{16, 128, 1024, 8192} {
			opt := OPT(tr, c)
			if opt.Hits > inf.Hits {
				t.Fatalf("%s capacity %d: OPT %d hits over infinite %d", name, c, opt.Hits, inf.Hits)
			}
			for _, k := range []policy.Kind{policy.LRU, policy.FIFO, policy.S3FIFO, policy.ARC, policy.Adaptive} {
				for _, rev := range []bool{false, true} {
					r := mustSimulate(t, tr, c, k, Options{ReverseTouch: rev})
					if r.Hits > opt.Hits {
						t.Fatalf("%s capacity %d: %v (reverse %v) %d hits over OPT %d", name, c, k, rev, r.Hits, opt.Hits)
					}
					if r.BlockRefs != inf.BlockRefs || r.Requests != len(tr) {
						t.Fatalf("%s: %v counted %d refs %d requests, want %d and %d", name, k, r.BlockRefs, r.Requests, inf.BlockRefs, len(tr))
					}
					if k == policy.LRU && !rev {
						if r.Hits < lastLRU {
							t.Fatalf("%s: LRU lost hits growing to capacity %d: %d < %d", name, c, r.Hits, lastLRU)
						}
						lastLRU = r.Hits
					}
				}
			}
			if opt.Hits < lastOPT {
				t.Fatalf("%s: OPT lost hits growing to capacity %d: %d < %d", name, c, opt.Hits, lastOPT)
			}
			lastOPT = opt.Hits
		}
		// With room for every id nothing is evicted and all agree with infinite.
		distinct := map[int64]bool{}
		for _, r := range tr {
			for _, id := range r.HashIDs {
				distinct[id] = true
			}
		}
		for _, k := range []policy.Kind{policy.LRU, policy.FIFO, policy.S3FIFO, policy.ARC, policy.Adaptive} {
			if r := mustSimulate(t, tr, len(distinct), k, Options{}); r != inf {
				t.Fatalf("%s: %v with room for all %d ids: %+v, infinite %+v", name, k, len(distinct), r, inf)
			}
		}
		if r := OPT(tr, len(distinct)); r != inf {
			t.Fatalf("%s: OPT with room for all ids: %+v, infinite %+v", name, r, inf)
		}
	}
}

func TestCheckChained(t *testing.T) {
	cases := []struct {
		name string
		tr   []trace.Request
		ok   bool
	}{
		{"chained", reqs(ids(1, 2, 3), ids(1, 2, 4), ids(5)), true},
		{"repeat in a request", reqs(ids(1, 2, 1)), false},
		{"two predecessors", reqs(ids(1, 3), ids(2, 3)), false},
		{"root later inside", reqs(ids(1), ids(2, 1)), false},
		{"inside later a root", reqs(ids(2, 1), ids(1)), false},
		// Id -1 was also CheckChained's mark for "first in its request":
		// 5 after -1 and 5 first passed as one predecessor.
		{"after -1, later a root", reqs(ids(-1, 5), ids(5)), false},
		{"a root, later after -1", reqs(ids(5), ids(-1, 5)), false},
		{"chained under -1", reqs(ids(-1, 5), ids(-1, 6), ids(-1)), true},
	}
	for _, c := range cases {
		err := CheckChained(c.tr)
		if c.ok != (err == nil) || (err != nil && !errors.Is(err, ErrNotChained)) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

func TestInfiniteIsPrefix(t *testing.T) {
	// Not chained: request 3 holds id 9, seen before, after 8, never seen.
	tr := reqs(ids(1, 9), ids(1, 2), ids(8, 9))
	wantResult(t, "infinite", Infinite(tr), 1, 6, 0)
}

// TestOPTTokensAreNotABound pins down what OPT's token ratio is: OPT
// maximises block hits, and a partial last block counts as one, so a policy
// can hit more tokens than OPT (here ARC keeps the full block OPT gives up
// for the partial one), while never more blocks.
func TestOPTTokensAreNotABound(t *testing.T) {
	tr := []trace.Request{
		{InputLength: 77, HashIDs: []int64{0}},  // a partial block
		{InputLength: 512, HashIDs: []int64{1}}, // a full block
		{InputLength: 77, HashIDs: []int64{0}},
		{InputLength: 512, HashIDs: []int64{1}},
	}
	if err := CheckChained(tr); err != nil {
		t.Fatal(err)
	}
	opt := OPT(tr, 1)
	arc, err := Simulate(tr, 1, policy.ARC, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if arc.Hits > opt.Hits {
		t.Fatalf("ARC %d block hits > OPT %d", arc.Hits, opt.Hits)
	}
	if arc.HitTokens <= opt.HitTokens {
		t.Fatalf("ARC %d hit tokens, OPT %d: the example no longer shows OPT's token ratio below a policy's", arc.HitTokens, opt.HitTokens)
	}
}
