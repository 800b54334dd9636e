package group_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/group"
)

// Two ranks of a tensor-parallel group in one process: each rank has its
// own Manager (its shard of the KV, under its own namespace), the group
// agrees on one valid prefix for every request.
func Example() {
	const ranks = 2
	local, _ := group.NewLocal(ranks) // a serving stack passes its NCCL/gloo/gRPC Collective instead
	defer local.Close()
	members := make([]*group.Rank, ranks)
	for r := range ranks {
		cfg, _ := group.RankConfig(kvtier.Config{GPUBlocks: 16, BlockTokens: 4, ModelID: "my-model@1"}, r, ranks)
		m, _ := kvtier.New(cfg)
		defer m.Close(context.Background())
		members[r], _ = group.NewRank(group.Config{Rank: r, Size: ranks, Manager: m, Collective: local.Rank(r)})
	}
	prompt := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9}
	deadline := time.Now().Add(time.Second) // derived once, passed to every rank
	for seq := uint64(1); seq <= 2; seq++ {
		valid := make([]int, ranks)
		var wg sync.WaitGroup
		for r, rk := range members {
			wg.Go(func() { // one goroutine per rank, as each rank's process would
				ctx := context.Background()
				res, err := rk.Allocate(ctx, group.AllocRequest{AllocRequest: kvtier.AllocRequest{Seq: seq, Tokens: prompt}, Deadline: deadline})
				if err != nil {
					return
				}
				// ... the engine computes prompt[res.ValidTokens:] into res.Blocks ...
				if _, err := rk.Commit(ctx, seq, len(prompt)); err != nil {
					return
				}
				valid[r] = res.ValidTokens
			})
		}
		wg.Wait()
		fmt.Printf("request %d: every rank starts from %v valid tokens\n", seq, valid)
	}
	// Output:
	// request 1: every rank starts from [0 0] valid tokens
	// request 2: every rank starts from [8 8] valid tokens
}
