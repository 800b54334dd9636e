package policy_test

import (
	"fmt"

	"github.com/kvtier/kvtier/policy"
)

// A shared prefix (blocks 1 and 2) is reused, then one-use prompt tails
// stream through a four-block tier. ARC evicts the tails and keeps the
// prefix; an LRU of the same size would have evicted 1 and 2 first.
func Example_arc() {
	const capacity = 4
	p, err := policy.New(policy.ARC, capacity)
	if err != nil {
		panic(err)
	}
	p.Add(1)
	p.Add(2)
	p.Access(1) // a second request hit the prefix
	p.Access(2)
	for k := policy.Key(100); k < 110; k++ { // one-use tails
		p.Add(k)
		for p.Len() > capacity {
			p.Evict(nil)
		}
	}
	fmt.Println(p.Contains(1), p.Contains(2), p.Len())
	// Output: true true 4
}
