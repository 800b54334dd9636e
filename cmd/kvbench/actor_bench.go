package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/kvtier/kvtier"
)

// runActor measures the alloc workload through the Manager API (default
// Config: GPU tier only, host gpu backend): one client,
// then actorClients clients at once, each sending batches of actorBatch
// allocations and freeing its previous batch, on a Manager of poolBlocks GPU
// blocks of bt tokens (the size of the direct run it is compared with); the
// parallel run only when parallel is set. The Manager's metrics go to mx, as
// configuration "alloc/actor" (16-token blocks) or "alloc/actor-<bt>".
func runActor(quick bool, mx metricsSink, bt int, parallel bool) (res actorResult, err error) {
	dur := actorWindow(quick)
	ctx := context.Background()
	name := "alloc/actor"
	if bt != blockTokens {
		name = fmt.Sprintf("alloc/actor-%d", bt)
	}
	m, err := kvtier.New(kvtier.Config{GPUBlocks: poolBlocks, BlockTokens: bt, Registerer: mx.registerer(name)})
	if err != nil {
		return actorResult{}, err
	}
	defer func() {
		if cerr := mx.close(ctx, m); err == nil && cerr != nil {
			err = fmt.Errorf("closing the manager: %w", cerr)
		}
	}()

	// Warm the pool as the direct run does: enough batches to cycle every block.
	warm := newActorClient(1, bt)
	for range poolBlocks/(actorBatch*(seqBlocks-stemBlocks)) + 2 {
		if err := warm.step(ctx, m); err != nil {
			return actorResult{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	if err := warm.drain(ctx, m); err != nil {
		return actorResult{}, err
	}

	one, err := actorThroughput(ctx, m, 1, 2, bt, dur)
	if err != nil {
		return actorResult{}, fmt.Errorf("one client: %w", err)
	}
	res = actorResult{built: true, blocksPerS: one}
	if parallel {
		if res.parallelBlocksPerS, err = actorThroughput(ctx, m, actorClients, 3, bt, dur); err != nil {
			return actorResult{}, fmt.Errorf("%d clients: %w", actorClients, err)
		}
	}
	return res, nil
}

// actorThroughput runs n clients (workload bases base..base+n-1) for about dur
// and returns the blocks allocated and freed per second, all clients together.
func actorThroughput(ctx context.Context, m *kvtier.Manager, n int, base int64, bt int, dur time.Duration) (float64, error) {
	errs := make([]error, n) // one slot per client: no shared error
	steps := make([]int, n)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(dur)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newActorClient(base+int64(i), bt)
			// At least one step: a client starved past the deadline on a
			// loaded machine would otherwise report nothing (0 blocks/s).
			for steps[i] == 0 || time.Now().Before(deadline) {
				if errs[i] = c.step(ctx, m); errs[i] != nil {
					return
				}
				steps[i]++
			}
			errs[i] = c.drain(ctx, m)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	total := 0
	for i := range n {
		if errs[i] != nil {
			return 0, fmt.Errorf("client %d: %w", i, errs[i])
		}
		total += steps[i]
	}
	return float64(total*actorBatch*seqBlocks) / elapsed.Seconds(), nil
}

// actorClient is one caller of the Manager: it holds its previous batch of
// sequences while it allocates the next, then frees the previous one.
type actorClient struct {
	w          *workload
	base, next uint64
	reqs       []kvtier.AllocRequest
	held, cur  []uint64
	commits    []kvtier.CommitItem // the previous batch's prompts, computed
	lens       []int
}

func newActorClient(base int64, bt int) *actorClient {
	return &actorClient{w: newWorkload(base, 4*actorBatch, bt), base: uint64(base) << 40}
}

func (c *actorClient) step(ctx context.Context, m *kvtier.Manager) error {
	c.reqs, c.cur = c.reqs[:0], c.cur[:0]
	for range actorBatch {
		c.next++
		id := c.base + c.next
		c.reqs = append(c.reqs, kvtier.AllocRequest{Seq: id, Tokens: c.w.prompt()})
		c.cur = append(c.cur, id)
	}
	// One message a step, as a scheduler drives the Manager: commit the
	// batch of the step before (its prefill ran), free it, allocate this one.
	c.commits = c.commits[:0]
	for i, id := range c.held {
		c.commits = append(c.commits, kvtier.CommitItem{Seq: id, Tokens: c.lens[i]})
	}
	st, err := m.Step(ctx, kvtier.StepRequest{Commit: c.commits, Free: c.held, Allocate: c.reqs})
	if err != nil {
		return err
	}
	for i, err := range st.CommitErrs {
		if err != nil {
			return fmt.Errorf("commit seq %d: %w", c.held[i], err)
		}
	}
	for i, err := range st.FreeErrs {
		if err != nil {
			return fmt.Errorf("free seq %d: %w", c.held[i], err)
		}
	}
	c.lens = c.lens[:0]
	for _, r := range c.reqs {
		c.lens = append(c.lens, len(r.Tokens))
	}
	res := st.Allocs
	for i := range res {
		if res[i].Err != nil {
			return fmt.Errorf("allocate seq %d: %w", c.cur[i], res[i].Err)
		}
	}
	// An engine writes KV only once Ready is done (evicted bytes have left),
	// so the wait is part of the allocation's cost.
	for i := range res {
		select {
		case <-res[i].Ready.Done():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c.held = c.held[:0]
	c.held, c.cur = c.cur, c.held
	return nil
}

// drain frees the held batch.
func (c *actorClient) drain(ctx context.Context, m *kvtier.Manager) error {
	if len(c.held) == 0 {
		return nil
	}
	errs, err := m.FreeBatch(ctx, c.held)
	if err != nil {
		return fmt.Errorf("free batch: %w", err)
	}
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("free seq %d: %w", c.held[i], err)
		}
	}
	c.held = c.held[:0]
	return nil
}
