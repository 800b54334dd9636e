package policy_test

import (
	"fmt"

	"github.com/kvtier/kvtier/policy"
)

func Example() {
	p, err := policy.New(policy.LRU, 4)
	if err != nil {
		panic(err)
	}
	for k := policy.Key(1); k <= 3; k++ {
		p.Add(k)
	}
	p.Access(1) // 1 is now the most recently used

	readers := map[policy.Key]int{2: 1} // 2 is being read: keep it
	victim, ok := p.Evict(func(k policy.Key) bool { return readers[k] == 0 })
	fmt.Println(victim, ok, p.Len())
	// Output: 3 true 2
}

func ExampleParseKind() {
	k, err := policy.ParseKind("S3FIFO")
	fmt.Println(k, err)
	// Output: s3fifo <nil>
}
