package scheduler

import (
	"context"
	"testing"

	"github.com/kvtier/kvtier/trace"
)

// finishCache is a fakeCache that is a FinishCache: it records each
// finished sequence's output count and each plain Free.
type finishCache struct {
	*fakeCache
	generated map[SeqID]int
	plain     int
}

func (c *finishCache) FreeFinished(ctx context.Context, seqs []SeqID, generated []int) error {
	for i, s := range seqs {
		if _, ok := c.generated[s]; ok {
			panic("a sequence finished twice")
		}
		c.generated[s] = generated[i]
	}
	return c.fakeCache.Free(ctx, seqs)
}

func (c *finishCache) Free(ctx context.Context, seqs []SeqID) error {
	c.plain += len(seqs)
	return c.fakeCache.Free(ctx, seqs)
}

// TestFinishCacheHearsOutputLengths: a Cache that is a FinishCache frees
// every finished sequence through FreeFinished, once, with the tokens it
// generated (the trace's output length under MaxOutputTokens), and nothing
// else through Free when nothing is preempted or requeued.
func TestFinishCacheHearsOutputLengths(t *testing.T) {
	c := &finishCache{fakeCache: newFakeCache(fakeConfig{gpuBlocks: 64, blockSize: 16}), generated: map[SeqID]int{}}
	reqs := []trace.Request{req(0, 100, 1, 0), req(0, 100, 5, 100), req(5, 100, 9, 200), req(9, 100, 30, 300)}
	res, err := Run(context.Background(), c, reqs, Config{MaxOutputTokens: 6})
	if err != nil {
		t.Fatal(err)
	}
	want := map[SeqID]int{1: 1, 2: 5, 3: 6, 4: 6}
	if res.Requests != len(reqs) || len(c.generated) != len(want) || c.plain != 0 {
		t.Fatalf("%d requests, finished %v, %d plain frees; want %v and none", res.Requests, c.generated, c.plain, want)
	}
	for s, n := range want {
		if c.generated[s] != n {
			t.Fatalf("finished %v, want %v", c.generated, want)
		}
	}
}
