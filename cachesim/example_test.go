package cachesim_test

import (
	"fmt"

	"github.com/kvtier/kvtier/cachesim"
	"github.com/kvtier/kvtier/policy"
	"github.com/kvtier/kvtier/trace"
)

func Example() {
	reqs := trace.Sample()
	lru, err := cachesim.Simulate(reqs, 1024, policy.LRU, cachesim.Options{})
	if err != nil {
		panic(err)
	}
	opt := cachesim.OPT(reqs, 1024)
	ideal := cachesim.Infinite(reqs)
	fmt.Printf("LRU %.2f%%, OPT %.2f%%, ideal %.2f%%\n", 100*lru.HitRatio, 100*opt.HitRatio, 100*ideal.HitRatio)
	fmt.Println(lru.Hits <= opt.Hits && opt.Hits <= ideal.Hits)
	// Output:
	// LRU 3.87%, OPT 14.79%, ideal 16.87%
	// true
}

// A hand-made trace: two turns of one conversation sharing a two-block
// prefix, with an unrelated request between them.
func ExampleSimulate() {
	reqs := []trace.Request{
		{InputLength: 1000, HashIDs: []int64{0, 1}},
		{InputLength: 300, HashIDs: []int64{2}},
		{InputLength: 1500, HashIDs: []int64{0, 1, 3}},
	}
	for _, k := range []policy.Kind{policy.LRU, policy.FIFO} {
		r, err := cachesim.Simulate(reqs, 2, k, cachesim.Options{ReverseTouch: true})
		if err != nil {
			panic(err)
		}
		fmt.Println(k, r)
	}
	fmt.Println("opt", cachesim.OPT(reqs, 2))
	// Output:
	// lru hit 16.67% (1/6 blocks, 3 requests, 3 evictions)
	// fifo hit 16.67% (1/6 blocks, 3 requests, 3 evictions)
	// opt hit 33.33% (2/6 blocks, 3 requests, 2 evictions)
}
