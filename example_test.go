package kvtier_test

import (
	"context"
	"fmt"

	"github.com/kvtier/kvtier"
)

// A sequence's blocks outlive it: a second request with the same prefix finds
// them on the GPU, and once evicted, in pinned memory.
func ExampleManager() {
	ctx := context.Background()
	m, err := kvtier.New(kvtier.Config{GPUBlocks: 8, BlockTokens: 4, PinnedBytes: 1 << 20})
	if err != nil {
		panic(err)
	}
	defer m.Close(ctx)

	prompt := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9}
	r, _ := m.Allocate(ctx, kvtier.AllocRequest{Seq: 1, Tokens: prompt})
	<-r.Ready.Done()
	// ... the engine computes the prompt's KV into r.Blocks, then commits it:
	// only committed blocks are ever served to another request.
	m.Commit(ctx, 1, len(prompt))
	m.Free(ctx, 1)

	r, _ = m.Allocate(ctx, kvtier.AllocRequest{Seq: 2, Tokens: prompt})
	fmt.Println("blocks:", len(r.Blocks), "cached tokens on the GPU:", r.Tokens.Of(kvtier.GPU))
	m.Free(ctx, 2)

	// Fill the GPU with other work: the prompt's blocks go to pinned memory.
	other := make([]int64, 32)
	for i := range other {
		other[i] = int64(100 + i)
	}
	r, _ = m.Allocate(ctx, kvtier.AllocRequest{Seq: 3, Tokens: other})
	<-r.Ready.Done()
	m.Commit(ctx, 3, len(other))
	m.Free(ctx, 3)
	m.Flush(ctx)

	p, _ := m.Exists(ctx, prompt, "")
	fmt.Println("gpu:", p.Tokens.Of(kvtier.GPU), "pinned:", p.Tokens.Of(kvtier.Pinned))
	r, _ = m.Allocate(ctx, kvtier.AllocRequest{Seq: 4, Tokens: prompt})
	<-r.Ready.Done()
	fmt.Println("loading from pinned:", r.Tokens.Of(kvtier.Pinned), "valid after the copy:", r.Ready.Outcome().ValidTokens)
	// Output:
	// blocks: 3 cached tokens on the GPU: 8
	// gpu: 0 pinned: 8
	// loading from pinned: 8 valid after the copy: 8
}
