package trace

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSubMillisecondOrder: Read returns requests in time order. Two
// fractional stamps that round to the same millisecond still say which
// came first: the earlier must come first, whatever the file order (the
// order in which a replay runs them decides which one warms the cache for
// the other).
func TestSubMillisecondOrder(t *testing.T) {
	for _, c := range []struct {
		in   string
		opts Options
	}{
		{tsLines("5", "4.5"), Options{}},                              // 4.5 rounds to 5
		{tsLines("0.0004", "0.0001"), Options{TimeUnit: time.Second}}, // both 0 ms
		{tsLines("1700000000.0004", "1700000000.0001"), Options{TimeUnit: time.Second, TimeScale: 2}},
	} {
		reqs, _, err := Read(strings.NewReader(c.in), c.opts)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, r := range reqs {
			ids = append(ids, r.HashIDs[0])
		}
		if !slices.Equal(ids, []int64{1, 0}) {
			t.Errorf("%q %+v: order %v, want [1 0]: the second line is earlier", c.in, c.opts, ids)
		}
	}
}
