package xxforge_test

import (
	"fmt"

	"github.com/kvtier/kvtier/internal/xxforge"
	"github.com/kvtier/kvtier/prefixhash"
)

func ExampleForgeBlock() {
	var h prefixhash.Hasher
	prev, hasPrev := prefixhash.Seed("tenant-a")
	victim := []int64{101, 102, 103, 104, 105, 106, 107, 108}
	target := h.Block(prev, hasPrev, victim)

	attacker := []int64{1, 2, 3, 4, 5, 6, 7, 8}
	forged, err := xxforge.ForgeBlock(prev, hasPrev, attacker, target)
	if err != nil {
		panic(err)
	}
	fmt.Println(forged[:7], h.Block(prev, hasPrev, forged) == target)
	// Output: [1 2 3 4 5 6 7] true
}
