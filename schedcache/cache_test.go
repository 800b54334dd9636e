package schedcache

import (
	"context"
	"errors"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/scheduler"
	"github.com/kvtier/kvtier/trace"
)

const blockTokens = 4

func newManager(t *testing.T, cfg kvtier.Config) *kvtier.Manager {
	t.Helper()
	if cfg.BlockTokens == 0 {
		cfg.BlockTokens = blockTokens
	}
	cfg.ReadDeadlineBase = -1
	m, err := kvtier.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return m
}

// pinnedBytes is the capacity of n pinned slots: a slot is a block rounded up
// to whole pages.
func pinnedBytes(t *testing.T, n, blockTokens int) int64 {
	t.Helper()
	layout, err := gpu.NewLayout(gpu.TinySpec, blockTokens)
	if err != nil {
		t.Fatal(err)
	}
	page := os.Getpagesize()
	return int64(n) * int64((layout.BlockBytes()+page-1)/page*page)
}

func seqTokens(first, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(first + i)
	}
	return out
}

func allocOne(t *testing.T, c *Cache, seq scheduler.SeqID, toks []int64) scheduler.AllocOutcome {
	t.Helper()
	outs, err := c.Allocate(context.Background(), []scheduler.AllocReq{{Seq: seq, Tokens: toks}})
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 1 {
		t.Fatalf("%d outcomes for one request", len(outs))
	}
	if outs[0].Err == nil {
		// The prompt's prefill ran: commit it, as the scheduler does.
		errs, err := c.Commit(context.Background(), []scheduler.SeqID{seq}, []int{len(toks)})
		if err != nil || errs[0] != nil {
			t.Fatalf("commit: %v %v", err, errs)
		}
	}
	return outs[0]
}

func TestAllocateHitsAndNoSpace(t *testing.T) {
	ctx := context.Background()
	c := New(newManager(t, kvtier.Config{GPUBlocks: 4}), Options{Sync: true})
	prompt := seqTokens(100, 9) // two full blocks and one token
	o := allocOne(t, c, 1, prompt)
	if o.Err != nil || o.GPUTokens != 0 || o.Ready != nil || o.Loaded != nil {
		t.Fatalf("first allocation: %+v", o)
	}
	if err := c.Free(ctx, []scheduler.SeqID{1}); err != nil {
		t.Fatal(err)
	}
	if o = allocOne(t, c, 2, prompt); o.Err != nil || o.GPUTokens != 8 {
		t.Fatalf("second allocation of the same prompt: %+v, want 8 GPU tokens", o)
	}
	// seq 2 holds 3 of 4 blocks: 8 more tokens cannot fit.
	o = allocOne(t, c, 3, seqTokens(500, 8))
	if !errors.Is(o.Err, scheduler.ErrNoBlocks) || !errors.Is(o.Err, kvtier.ErrNoSpace) {
		t.Fatalf("allocation over capacity: %v, want ErrNoBlocks wrapping ErrNoSpace", o.Err)
	}
	var ns *blockpool.NoSpaceError
	if !errors.As(o.Err, &ns) || ns.Needed != 2 {
		t.Fatalf("allocation over capacity: %v, want a *blockpool.NoSpaceError needing 2", o.Err)
	}
}

// TestAllocateIsInOrder: one call allocates the step's batch first come,
// first served: a sequence that would fit behind one that does not is not
// allocated (the scheduler would free it again, its loads started for
// nothing).
func TestAllocateIsInOrder(t *testing.T) {
	m := newManager(t, kvtier.Config{GPUBlocks: 3})
	c := New(m, Options{})
	outs, err := c.Allocate(context.Background(), []scheduler.AllocReq{
		{Seq: 1, Tokens: seqTokens(0, 8)},
		{Seq: 2, Tokens: seqTokens(50, 8)}, // 2 more blocks: only 1 left
		{Seq: 3, Tokens: seqTokens(90, 3)}, // 1 block: would fit
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 3 || outs[0].Err != nil || !errors.Is(outs[1].Err, scheduler.ErrNoBlocks) || !errors.Is(outs[2].Err, scheduler.ErrNoBlocks) {
		t.Fatalf("outcomes %+v: want ok, ErrNoBlocks, ErrNoBlocks", outs)
	}
	if err := m.Free(context.Background(), 3); !errors.Is(err, blockpool.ErrUnknownSequence) {
		t.Fatalf("sequence 3 behind one short of blocks was allocated (free: %v)", err)
	}
}

func TestAppendMapsNoSpace(t *testing.T) {
	ctx := context.Background()
	c := New(newManager(t, kvtier.Config{GPUBlocks: 3}), Options{Sync: true})
	if o := allocOne(t, c, 1, seqTokens(0, 4)); o.Err != nil {
		t.Fatal(o.Err)
	}
	if o := allocOne(t, c, 2, seqTokens(100, 7)); o.Err != nil {
		t.Fatal(o.Err)
	}
	// seq 1 needs a new block (the pool has none); seq 2 fills its second block.
	errs, err := c.Append(ctx, []scheduler.SeqID{1, 2}, []int64{7, 9})
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) != 2 || !errors.Is(errs[0], scheduler.ErrNoBlocks) || errs[1] != nil {
		t.Fatalf("append errors %v: want [ErrNoBlocks, nil]", errs)
	}
	if _, err := c.Append(ctx, []scheduler.SeqID{1}, nil); err == nil {
		t.Fatal("append with fewer tokens than sequences: no error")
	}
	if err := c.Free(ctx, []scheduler.SeqID{1, 2}); err != nil {
		t.Fatal(err)
	}
	if err := c.Free(ctx, []scheduler.SeqID{1}); err == nil {
		t.Fatal("freeing a freed sequence: no error")
	}
}

// TestOnboardFromPinned: a prompt whose blocks were evicted from the GPU comes
// back from pinned memory, and Loaded reports every one of its tokens.
func TestOnboardFromPinned(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, kvtier.Config{GPUBlocks: 4, PinnedBytes: pinnedBytes(t, 32, blockTokens)})
	c := New(m, Options{Sync: true})
	prompt := seqTokens(1000, 13) // three full blocks
	if o := allocOne(t, c, 1, prompt); o.Err != nil {
		t.Fatal(o.Err)
	}
	if err := c.Free(ctx, []scheduler.SeqID{1}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // push the prompt's blocks out of the GPU
		id := scheduler.SeqID(10 + i)
		if o := allocOne(t, c, id, seqTokens(2000+100*i, 16)); o.Err != nil {
			t.Fatal(o.Err)
		}
		if err := c.Free(ctx, []scheduler.SeqID{id}); err != nil {
			t.Fatal(err)
		}
	}
	o := allocOne(t, c, 2, prompt)
	if o.Err != nil || o.PinnedTokens == 0 || o.Ready == nil || o.Loaded == nil {
		t.Fatalf("reallocation after eviction: %+v, want a load from pinned memory", o)
	}
	<-o.Ready
	if got, want := o.Loaded(), o.PinnedTokens+o.DiskTokens; got != want {
		t.Fatalf("Loaded() = %d, want %d", got, want)
	}
	if o.GPUTokens+o.PinnedTokens != 12 {
		t.Fatalf("GPU %d + pinned %d tokens, want the 12 of three full blocks", o.GPUTokens, o.PinnedTokens)
	}
	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Tier(kvtier.GPU).Onboarded == 0 {
		t.Fatalf("stats count no onboarded block: %v", st.Tier(kvtier.GPU))
	}
}

func TestSwapUnsupported(t *testing.T) {
	c := New(newManager(t, kvtier.Config{GPUBlocks: 2}), Options{})
	if err := c.Swap(context.Background(), []scheduler.SeqID{1}); !errors.Is(err, scheduler.ErrUnsupported) {
		t.Fatalf("Swap: %v, want ErrUnsupported", err)
	}
}

// TestSwapToPinned: with a pinned tier, Swap frees the sequence and its full
// blocks land in pinned memory.
func TestSwapToPinned(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, kvtier.Config{GPUBlocks: 16, PinnedBytes: 1 << 20, OffloadThreshold: 1})
	c := New(m, Options{Sync: true})
	toks := make([]int64, 3*blockTokens+1)
	for i := range toks {
		toks[i] = int64(7 + i)
	}
	out, err := c.Allocate(ctx, []scheduler.AllocReq{{Seq: 1, Tokens: toks}})
	if err != nil || out[0].Err != nil {
		t.Fatal(err, out)
	}
	// A swap in the middle of the prefill writes nothing down: one block is
	// computed so far, and only it may reach pinned memory.
	if _, err := c.Commit(ctx, []scheduler.SeqID{1}, []int{blockTokens + 1}); err != nil {
		t.Fatal(err)
	}
	out, err = c.Allocate(ctx, []scheduler.AllocReq{{Seq: 2, Tokens: toks}})
	if err != nil || out[0].Err != nil {
		t.Fatal(err, out)
	}
	if err := c.Swap(ctx, []scheduler.SeqID{2}); err != nil {
		t.Fatal(err)
	}
	if p, err := m.Exists(ctx, toks, ""); err != nil || p.Tokens.Of(kvtier.Pinned) != blockTokens {
		t.Fatalf("after swapping a half-computed sequence %+v %v, want its one committed block in pinned memory", p, err)
	}
	if _, err := c.Commit(ctx, []scheduler.SeqID{1}, []int{len(toks)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Swap(ctx, []scheduler.SeqID{1}); err != nil {
		t.Fatal(err)
	}
	p, err := m.Exists(ctx, toks, "")
	if err != nil || p.Tokens.Of(kvtier.Pinned) != 3*blockTokens {
		t.Fatalf("after swap %+v %v, want 3 blocks in pinned memory", p, err)
	}
	if err := c.Free(ctx, []scheduler.SeqID{1}); err == nil {
		t.Fatal("a swapped-out sequence could be freed again")
	}
}

func TestClosedManager(t *testing.T) {
	m, err := kvtier.New(kvtier.Config{GPUBlocks: 2, BlockTokens: blockTokens})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := New(m, Options{})
	if _, err := c.Allocate(context.Background(), []scheduler.AllocReq{{Seq: 1, Tokens: seqTokens(0, 3)}}); !errors.Is(err, kvtier.ErrClosed) {
		t.Fatalf("Allocate after Close: %v, want ErrClosed", err)
	}
	if err := c.Flush(context.Background()); !errors.Is(err, kvtier.ErrClosed) {
		t.Fatalf("Flush after Close: %v, want ErrClosed", err)
	}
}

// smallTrace is a synthetic multi-turn workload small enough for -race.
func smallTrace(t *testing.T) []trace.Request {
	t.Helper()
	cfg := trace.DefaultSyntheticConfig()
	cfg.Sessions, cfg.Concurrency, cfg.RatePerSecond = 16, 6, 20
	cfg.Turns = trace.IntRange{Min: 1, Max: 4}
	cfg.SystemPrompts, cfg.SystemTokens = 2, trace.IntRange{Min: 512, Max: 1024}
	cfg.UserTokens, cfg.OutputTokens = trace.IntRange{Min: 256, Max: 768}, trace.IntRange{Min: 2, Max: 8}
	cfg.MaxInputTokens = 4096
	reqs, err := trace.Synthetic(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

// TestRunThroughEveryTier replays a small trace through GPU, pinned memory and
// disk twice: the scheduler runs to the end, lower tiers serve hits, and with
// Sync the two runs agree exactly.
func TestRunThroughEveryTier(t *testing.T) {
	reqs := smallTrace(t)
	replay := func() scheduler.Result {
		m := newManager(t, kvtier.Config{
			GPUBlocks: 80, BlockTokens: 64,
			PinnedBytes: pinnedBytes(t, 160, 64),
			DiskDir:     t.TempDir(), DiskBytes: 4 << 20, DiskWriteQuota: 1 << 10,
		})
		res, err := scheduler.Run(context.Background(), New(m, Options{Sync: true}), reqs,
			scheduler.Config{MaxNumBatchedTokens: 256, Vocab: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	a := replay()
	if a.Requests != len(reqs) {
		t.Fatalf("%d of %d requests finished", a.Requests, len(reqs))
	}
	if a.GPUTokens == 0 || a.PinnedTokens+a.DiskTokens == 0 {
		t.Fatalf("hits GPU %d, pinned %d, disk %d: want hits on the GPU and below it", a.GPUTokens, a.PinnedTokens, a.DiskTokens)
	}
	if b := replay(); !reflect.DeepEqual(a, b) {
		t.Fatalf("two runs differ:\n%+v\n%+v", a, b)
	}
}

// TestAllocateWithdrawnPartFreesTheRest: a batch in which one request parks
// for blocks (write-downs behind an unsignalled fence pin them) and is
// withdrawn when the context ends, while another was applied, fails as a
// whole and frees what it allocated — in both modes (Sync, and without) —
// since the scheduler takes a failed call as allocating nothing. Before,
// the applied sequence stayed allocated (half of the Sync runs, every
// other run).
func TestAllocateWithdrawnPartFreesTheRest(t *testing.T) {
	for _, sync := range []bool{true, false} {
		ctx := context.Background()
		dev, err := gpu.NewHost(gpu.HostConfig{})
		if err != nil {
			t.Fatal(err)
		}
		m := newManager(t, kvtier.Config{Device: dev, GPUBlocks: 4, PinnedBytes: 1 << 20, OffloadThreshold: 0.1, OffloadAhead: 4})
		r, err := m.Allocate(ctx, kvtier.AllocRequest{Seq: 1, Tokens: seqTokens(100, 2*blockTokens)})
		if err != nil {
			t.Fatal(err)
		}
		<-r.Ready.Done()
		f, err := gpu.NewSignalFence(dev)
		if err != nil {
			t.Fatal(err)
		}
		if errs, err := m.CommitBatch(ctx, []kvtier.CommitItem{{Seq: 1, Tokens: kvtier.AllTokens, After: f}}); err != nil || errs[0] != nil {
			t.Fatal(err, errs)
		}
		if err := m.Free(ctx, 1); err != nil {
			t.Fatal(err)
		}
		c := New(m, Options{Sync: sync})
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		outs, err := c.Allocate(short, []scheduler.AllocReq{
			{Seq: 2, Tokens: seqTokens(900, 4*blockTokens)}, // parks, then withdrawn
			{Seq: 5, Tokens: seqTokens(3000, blockTokens)},  // applied
		})
		cancel()
		f.Signal()
		if err == nil || outs != nil {
			t.Fatalf("sync %v: Allocate with a withdrawn part: %+v, %v; want the call to fail", sync, outs, err)
		}
		if ferr := m.Free(ctx, 5); !errors.Is(ferr, blockpool.ErrUnknownSequence) {
			t.Errorf("sync %v: sequence 5 was left allocated after the failed call (free: %v)", sync, ferr)
		}
	}
}

// TestFullyCachedPromptKeepsItsLastBlock: a prompt of whole blocks, all
// cached, is allocated with its last block to compute (the engine
// contract's MaxHitTokens = len-1, rounded down to blocks), as vLLM does; a
// one-token prompt gets no hit. The adaptor asked for no cap: the Manager
// served the whole prompt, and the scheduler computed its last token into
// a committed block other sequences share.
func TestFullyCachedPromptKeepsItsLastBlock(t *testing.T) {
	ctx := context.Background()
	c := New(newManager(t, kvtier.Config{GPUBlocks: 8}), Options{})
	p := seqTokens(10, 2*blockTokens)
	allocOne(t, c, 1, p)
	if err := c.Free(ctx, []scheduler.SeqID{1}); err != nil {
		t.Fatal(err)
	}
	if o := allocOne(t, c, 2, p); o.GPUTokens != blockTokens {
		t.Fatalf("a fully cached 2-block prompt: %d GPU tokens, want %d (its last block kept to compute)", o.GPUTokens, blockTokens)
	}
	longer := append(append([]int64(nil), p...), 99)
	if o := allocOne(t, c, 3, longer); o.GPUTokens != 2*blockTokens {
		t.Fatalf("the prompt and one token more: %d GPU tokens, want %d (both full blocks)", o.GPUTokens, 2*blockTokens)
	}
	if o := allocOne(t, c, 4, p[:1]); o.GPUTokens != 0 {
		t.Fatalf("a one-token prompt: %d GPU tokens, want 0", o.GPUTokens)
	}
}
