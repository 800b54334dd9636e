package cachesim

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvtier/kvtier/policy"
	"github.com/kvtier/kvtier/trace"
)

// reqs builds a trace from id lists; each id stands for a full block.
func reqs(idLists ...[]int64) []trace.Request {
	out := make([]trace.Request, len(idLists))
	for i, ids := range idLists {
		out[i] = trace.Request{Timestamp: int64(i), InputLength: len(ids) * trace.BlockTokens, HashIDs: ids}
	}
	return out
}

func ids(v ...int64) []int64 { return v }

func mustSimulate(t *testing.T, tr []trace.Request, capacity int, kind policy.Kind, opts Options) Result {
	t.Helper()
	r, err := Simulate(tr, capacity, kind, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// classics are the policies Adaptive is measured against.
var classics = []policy.Kind{policy.LRU, policy.FIFO, policy.S3FIFO, policy.ARC}

// bestClassic replays tr through each of classics and returns the result
// with the most hits and its policy.
func bestClassic(t *testing.T, tr []trace.Request, capacity int) (Result, policy.Kind) {
	t.Helper()
	var best Result
	kind := classics[0]
	for i, k := range classics {
		if r := mustSimulate(t, tr, capacity, k, Options{}); i == 0 || r.Hits > best.Hits {
			best, kind = r, k
		}
	}
	return best, kind
}

// synthetic generates trace.Synthetic's default workload changed by mod.
func synthetic(t *testing.T, mod func(*trace.SyntheticConfig)) []trace.Request {
	t.Helper()
	cfg := trace.DefaultSyntheticConfig()
	mod(&cfg)
	tr, err := trace.Synthetic(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func wantResult(t *testing.T, name string, got Result, hits, refs, evictions int64) {
	t.Helper()
	if got.Hits != hits || got.BlockRefs != refs || got.Evictions != evictions {
		t.Fatalf("%s: got %+v, want %d hits of %d refs, %d evictions", name, got, hits, refs, evictions)
	}
	if want := float64(hits) / float64(refs); got.HitRatio != want {
		t.Fatalf("%s: hit ratio %v, want %v", name, got.HitRatio, want)
	}
}

// TestHandMadeLRUvsFIFO: at capacity 3 FIFO evicts block 1 although it was
// just hit; in the last request block 2 is still resident under FIFO but does
// not count, because block 1 before it is gone (prefix semantics).
func TestHandMadeLRUvsFIFO(t *testing.T) {
	tr := reqs(ids(1, 2), ids(3), ids(1, 2), ids(4), ids(1, 2, 5))
	wantResult(t, "lru", mustSimulate(t, tr, 3, policy.LRU, Options{}), 4, 9, 2)
	wantResult(t, "fifo", mustSimulate(t, tr, 3, policy.FIFO, Options{}), 2, 9, 3)
	wantResult(t, "opt", OPT(tr, 3), 4, 9, 2)
	wantResult(t, "infinite", Infinite(tr), 4, 9, 0)
	if r := mustSimulate(t, tr, 3, policy.LRU, Options{}); r.Requests != 5 {
		t.Fatalf("requests %d, want 5", r.Requests)
	}
}

// TestHandMadeReverseTouch: a three-block prompt in a two-block LRU keeps its
// tail when touched in order and its head when touched in reverse; only the
// head can give prefix hits.
func TestHandMadeReverseTouch(t *testing.T) {
	tr := reqs(ids(1, 2, 3), ids(1, 2))
	wantResult(t, "lru", mustSimulate(t, tr, 2, policy.LRU, Options{}), 0, 5, 2)
	wantResult(t, "lru reverse", mustSimulate(t, tr, 2, policy.LRU, Options{ReverseTouch: true}), 2, 5, 1)
	wantResult(t, "opt", OPT(tr, 2), 2, 5, 1)
	wantResult(t, "infinite", Infinite(tr), 2, 5, 0)
}

// TestHandMadeS3FIFO: block 1 is hit once in the small queue, so when block 3
// needs room S3-FIFO promotes it to main and evicts the one-hit block 2; LRU
// and FIFO evict block 1.
func TestHandMadeS3FIFO(t *testing.T) {
	tr := reqs(ids(1), ids(1), ids(2), ids(3), ids(1))
	wantResult(t, "s3fifo", mustSimulate(t, tr, 2, policy.S3FIFO, Options{}), 2, 5, 1)
	wantResult(t, "lru", mustSimulate(t, tr, 2, policy.LRU, Options{}), 1, 5, 2)
	wantResult(t, "fifo", mustSimulate(t, tr, 2, policy.FIFO, Options{}), 1, 5, 2)
	wantResult(t, "opt", OPT(tr, 2), 2, 5, 1)
	wantResult(t, "infinite", Infinite(tr), 2, 5, 0)
}

// TestOPTEvictsDescendantFirst: blocks 1 and 2 are next used by the same
// request; with room for one, OPT must keep the ancestor 1 (a resident 2
// without 1 gives no prefix hit).
func TestOPTEvictsDescendantFirst(t *testing.T) {
	tr := reqs(ids(1, 2), ids(1, 2))
	wantResult(t, "opt", OPT(tr, 1), 1, 4, 2)
	wantResult(t, "opt no cache", OPT(tr, 0), 0, 4, 4)
	wantResult(t, "opt negative capacity", OPT(tr, -5), 0, 4, 4)
}

func TestEmptyTrace(t *testing.T) {
	for name, r := range map[string]Result{
		"lru":      mustSimulate(t, nil, 4, policy.LRU, Options{}),
		"opt":      OPT(nil, 4),
		"infinite": Infinite(nil),
	} {
		if r != (Result{}) {
			t.Fatalf("%s on an empty trace: %+v", name, r)
		}
	}
}

func TestSimulateErrors(t *testing.T) {
	tr := reqs(ids(1))
	if _, err := Simulate(tr, 0, policy.LRU, Options{}); !errors.Is(err, ErrCapacity) {
		t.Fatalf("capacity 0: %v, want ErrCapacity", err)
	}
	if _, err := Simulate(tr, 4, policy.Kind(0), Options{}); !errors.Is(err, policy.ErrUnknownKind) {
		t.Fatalf("kind 0: %v, want policy.ErrUnknownKind", err)
	}
	if _, err := SimulatePolicy(tr, 4, nil, Options{}); err == nil {
		t.Fatal("nil policy: no error")
	}
	p, err := policy.New(policy.LRU, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SimulatePolicy(tr, -1, p, Options{}); !errors.Is(err, ErrCapacity) {
		t.Fatalf("capacity -1: %v, want ErrCapacity", err)
	}
}

// TestSimulatePolicyWarm: a caller-built policy keeps its resident set across
// runs, so a second pass over the same trace starts warm.
func TestSimulatePolicyWarm(t *testing.T) {
	tr := reqs(ids(1, 2), ids(3, 4))
	p, err := policy.New(policy.LRU, 8)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := SimulatePolicy(tr, 8, p, Options{}); err != nil || r.Hits != 0 {
		t.Fatalf("cold pass: %+v %v", r, err)
	}
	if r, err := SimulatePolicy(tr, 8, p, Options{}); err != nil || r.Hits != 4 {
		t.Fatalf("warm pass: %+v %v, want 4 hits", r, err)
	}
}

// refLRU is the obvious LRU model: a slice ordered from least to most recent.
type refLRU struct {
	order []int64
	cap   int
}

func (m *refLRU) run(tr []trace.Request, reverse bool) (hits int64) {
	for _, r := range tr {
		for _, id := range r.HashIDs {
			if !slices.Contains(m.order, id) {
				break
			}
			hits++
		}
		touch := slices.Clone(r.HashIDs)
		if reverse {
			slices.Reverse(touch)
		}
		for _, id := range touch {
			if i := slices.Index(m.order, id); i >= 0 {
				m.order = slices.Delete(m.order, i, i+1)
			}
			m.order = append(m.order, id)
		}
		if n := len(m.order) - m.cap; n > 0 {
			m.order = m.order[n:]
		}
	}
	return hits
}

// randomChained returns a random trace over at most maxIDs chained ids: each
// request walks down a random trie from a root, reusing a child or making a
// new one.
func randomChained(rng *rand.Rand, requests, maxIDs, maxLen int) []trace.Request {
	children := map[int64][]int64{} // -1 is the virtual root
	next := int64(0)
	var out [][]int64
	for range requests {
		var path []int64
		at := int64(-1)
	walk:
		for range 1 + rng.IntN(maxLen) {
			kids := children[at]
			var id int64
			switch {
			case len(kids) > 0 && (rng.IntN(3) > 0 || next == int64(maxIDs)):
				id = kids[rng.IntN(len(kids))]
			case next < int64(maxIDs):
				id = next
				next++
				children[at] = append(children[at], id)
			default:
				break walk
			}
			path = append(path, id)
			at = id
		}
		if len(path) > 0 {
			out = append(out, path)
		}
	}
	return reqs(out...)
}

func TestLRUMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		tr := randomChained(rng, 30, 40, 6)
		capacity := 1 + rng.IntN(12)
		for _, reverse := range []bool{false, true} {
			got := mustSimulate(t, tr, capacity, policy.LRU, Options{ReverseTouch: reverse})
			m := &refLRU{cap: capacity}
			if want := m.run(tr, reverse); got.Hits != want {
				t.Fatalf("trial %d capacity %d reverse %v: %d hits, model %d", trial, capacity, reverse, got.Hits, want)
			}
		}
	}
}

// TestTokenCounts: a request's hit tokens are its whole prompt when every
// block hit (its partial last block included), else hits x BlockTokens; OPT,
// Infinite and Simulate count alike.
func TestTokenCounts(t *testing.T) {
	tr := []trace.Request{
		{InputLength: 6, HashIDs: ids(1, 2)},     // 4 + a partial 2
		{InputLength: 6, HashIDs: ids(1, 2)},     // identical: 6 tokens hit
		{InputLength: 10, HashIDs: ids(1, 3, 4)}, // 1 block hits: 4 tokens
	}
	opts := Options{BlockTokens: 4}
	check := func(name string, r Result) {
		t.Helper()
		if r.PromptTokens != 22 || r.HitTokens != 10 || r.TokenHitRatio != 10.0/22 || r.Hits != 3 {
			t.Errorf("%s: %+v, want 10 of 22 tokens and 3 blocks hit", name, r)
		}
	}
	check("Infinite", Infinite(tr, opts))
	check("OPT", OPT(tr, 8, opts))
	check("Simulate", mustSimulate(t, tr, 8, policy.LRU, opts))
	// Without BlockTokens a hash id holds Mooncake's 512 tokens, capped by
	// the prompt: the third request's one hit block is its first 10 tokens.
	if r := OPT(tr, 8); r.HitTokens != 16 {
		t.Errorf("OPT with the default block size: %d hit tokens, want 6 + 10", r.HitTokens)
	}
}
