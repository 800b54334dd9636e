package scheduler_test

import (
	"context"
	"fmt"

	"github.com/kvtier/kvtier/scheduler"
	"github.com/kvtier/kvtier/trace"
)

// gpuOnly is a toy Cache: an unbounded GPU that remembers whole prompts.
type gpuOnly struct{ seen map[string]bool }

func (c *gpuOnly) Allocate(_ context.Context, reqs []scheduler.AllocReq) ([]scheduler.AllocOutcome, error) {
	outs := make([]scheduler.AllocOutcome, len(reqs))
	for i, r := range reqs {
		key := fmt.Sprint(r.Tokens)
		if c.seen[key] {
			outs[i].GPUTokens = len(r.Tokens)
		}
		c.seen[key] = true
	}
	return outs, nil
}

func (c *gpuOnly) Append(_ context.Context, seqs []scheduler.SeqID, _ []int64) ([]error, error) {
	return make([]error, len(seqs)), nil
}
func (c *gpuOnly) Free(context.Context, []scheduler.SeqID) error { return nil }
func (c *gpuOnly) Commit(_ context.Context, seqs []scheduler.SeqID, _ []int) ([]error, error) {
	return make([]error, len(seqs)), nil
}
func (c *gpuOnly) Swap(context.Context, []scheduler.SeqID) error { return scheduler.ErrUnsupported }
func (c *gpuOnly) Flush(context.Context) error                   { return nil }

func ExampleRun() {
	prompt := trace.Request{InputLength: 1000, OutputLength: 10, HashIDs: []int64{7, 8}}
	later := prompt
	later.Timestamp = 60_000 // one minute later, the same prompt again
	res, err := scheduler.Run(context.Background(), &gpuOnly{seen: map[string]bool{}},
		[]trace.Request{prompt, later}, scheduler.Config{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("requests %d, prefill %d tokens, hit ratio %.4f, preemptions %d\n",
		res.Requests, res.PrefillTokens, res.HitRatio, res.Preemptions)
	// Output:
	// requests 2, prefill 1001 tokens, hit ratio 0.4995, preemptions 0
}
