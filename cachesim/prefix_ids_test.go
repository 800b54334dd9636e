package cachesim

import (
	"testing"

	"github.com/kvtier/kvtier/policy"
	"github.com/kvtier/kvtier/trace"
)

// TestPrefixIDs: on a chained trace the ids are only renamed (OPT and LRU
// count the same hits); on one that is not, the result is chained and an id
// met after another prefix is a different block: [7, 8] does not hit the 8
// that [8, 9] brought.
func TestPrefixIDs(t *testing.T) {
	sample := trace.Sample()[:200]
	p := PrefixIDs(sample)
	if err := CheckChained(p); err != nil {
		t.Fatal(err)
	}
	for _, c := range []int{64, 1024} {
		a, b := OPT(sample, c), OPT(p, c)
		la, lb := mustSimulate(t, sample, c, policy.LRU, Options{}), mustSimulate(t, p, c, policy.LRU, Options{})
		if a != b || la != lb {
			t.Fatalf("capacity %d: renaming a chained trace changed hits: OPT %v / %v, LRU %v / %v", c, a, b, la, lb)
		}
	}
	tr := reqs(ids(7), ids(8, 9), ids(7, 8))
	got := PrefixIDs(tr)
	if err := CheckChained(got); err != nil {
		t.Fatal(err)
	}
	if want := [][]int64{{0}, {1, 2}, {0, 3}}; len(got) != 3 || !equalIDs(got, want) {
		t.Fatalf("PrefixIDs %v, want %v", got, want)
	}
	if tr[2].HashIDs[1] != 8 {
		t.Fatal("PrefixIDs modified its input")
	}
	if r := OPT(got, 3); r.Hits != 1 {
		t.Fatalf("OPT over prefixes: %d hits, want 1 (only [7] is met again)", r.Hits)
	}
}

func equalIDs(got []trace.Request, want [][]int64) bool {
	for i, r := range got {
		if len(r.HashIDs) != len(want[i]) {
			return false
		}
		for j, id := range r.HashIDs {
			if id != want[i][j] {
				return false
			}
		}
	}
	return true
}

// TestPrefixBlocks: groups of ids become one block named by the prefix
// through its last id; a short last group is a partial block.
func TestPrefixBlocks(t *testing.T) {
	tr := reqs(ids(1, 2, 3, 4), ids(1, 2, 3, 9), ids(1, 2, 3, 4, 10), ids(1, 2))
	got := PrefixBlocks(tr, 4)
	// PrefixIDs: [0 1 2 3] [0 1 2 4] [0 1 2 3 5] [0 1].
	if want := [][]int64{{3}, {4}, {3, 5}, {1}}; !equalIDs(got, want) {
		t.Fatalf("PrefixBlocks %v, want %v", got, want)
	}
	if err := CheckChained(got); err != nil {
		t.Fatal(err)
	}
	if p := PrefixBlocks(tr, 1); !equalIDs(p, [][]int64{{0, 1, 2, 3}, {0, 1, 2, 4}, {0, 1, 2, 3, 5}, {0, 1}}) {
		t.Fatalf("group 1: %v", p)
	}
}
