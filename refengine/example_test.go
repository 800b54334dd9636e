package refengine_test

import (
	"fmt"
	"math"

	"github.com/kvtier/kvtier/refengine"
)

// A prompt prefilled in two chunks over one KVStore gives the logits of a
// recompute with no cache, bit for bit (the package doc's usage).
func Example() {
	m, err := refengine.New(refengine.TinyConfig)
	if err != nil {
		panic(err)
	}
	prompt := []int64{3, 1, 4, 1, 5, 9, 2, 6}
	kv := m.NewMemKV()
	first, err := m.Forward(kv, prompt[:5], 0)
	if err != nil {
		panic(err)
	}
	rest, err := m.Forward(kv, prompt[5:], 5)
	if err != nil {
		panic(err)
	}
	ref, err := m.Reference(prompt)
	if err != nil {
		panic(err)
	}
	same := true
	for i, row := range append(first, rest...) {
		for j, x := range row {
			same = same && math.Float32bits(x) == math.Float32bits(ref[i][j])
		}
	}
	tokens, _, err := m.Generate(kv, []int64{refengine.Argmax(rest[len(rest)-1])}, len(prompt), 4)
	fmt.Println("bit-identical:", same, "generated:", len(tokens), err)
	// Output:
	// bit-identical: true generated: 4 <nil>
}
