package kvtier

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/policy"
	"github.com/kvtier/kvtier/prefixhash"
)

const bt = 4 // tokens per block in these tests

func newManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	if cfg.BlockTokens == 0 {
		cfg.BlockTokens = bt
	}
	if cfg.ReadDeadlineBase == 0 {
		// Loads are not meant to time out here, however loaded the machine.
		cfg.ReadDeadlineBase = time.Minute
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

func toks(base, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(base + i)
	}
	return out
}

// pattern fills a block with bytes derived from (block hash, layer, K/V).
func pattern(l gpu.Layout, h prefixhash.Hash) []byte {
	buf := make([]byte, l.BlockBytes())
	for layer := range l.Spec().Layers {
		for _, kv := range []gpu.KV{gpu.Key, gpu.Value} {
			off, size := l.Region(layer, kv)
			for i := 0; i < size; i += 8 {
				v := uint64(h)*31 + uint64(layer)*7 + uint64(kv)
				var b [8]byte
				binary.LittleEndian.PutUint64(b[:], v+uint64(i))
				copy(buf[off+i:off+size], b[:])
			}
		}
	}
	return buf
}

func writeBlocks(t *testing.T, m *Manager, blocks []BlockID, tokens []int64, salt string) {
	t.Helper()
	var h prefixhash.Hasher
	for i, hash := range h.Chain(nil, salt, tokens, m.BlockTokens()) {
		if err := m.Arena().WriteBlock(int(blocks[i]), 0, pattern(m.Layout(), hash)); err != nil {
			t.Fatal(err)
		}
	}
}

func checkBlocks(t *testing.T, m *Manager, blocks []BlockID, tokens []int64, salt string, n int) {
	t.Helper()
	var h prefixhash.Hasher
	got := make([]byte, m.Layout().BlockBytes())
	for i, hash := range h.Chain(nil, salt, tokens, m.BlockTokens())[:n] {
		if err := m.Arena().ReadBlock(int(blocks[i]), 0, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, pattern(m.Layout(), hash)) {
			t.Fatalf("block %d (id %d) does not hold its bytes", i, blocks[i])
		}
	}
}

func wait(t *testing.T, r AllocResult) OnboardOutcome {
	t.Helper()
	select {
	case <-r.Ready.Done():
		return r.Ready.Outcome()
	case <-time.After(10 * time.Second):
		t.Fatal("Ready never completed")
	}
	return OnboardOutcome{}
}

func TestConfigValidation(t *testing.T) {
	cases := []Config{
		{},
		{GPUBlocks: 4, BlockTokens: -1},
		{GPUBlocks: 4, OffloadThreshold: 2},
		{GPUBlocks: 4, PinnedBytes: -1},
		{GPUBlocks: 4, Ingestion: 9},
		{GPUBlocks: 4, DoubleGetMinRatio: 1.5},
		{GPUBlocks: 4, Model: gpu.ModelSpec{Layers: 1}},
		{GPUBlocks: 4, MetricsNamespaces: "tenant-a, other"},
		{GPUBlocks: 4, MetricsNamespaces: "default"},
	}
	for _, c := range cases {
		orig := c
		if _, err := New(c); !errors.Is(err, ErrBadConfig) {
			t.Fatalf("%+v: got %v, want ErrBadConfig", c, err)
		}
		if c != orig {
			t.Fatal("New changed the caller's config")
		}
	}
	var ce *ConfigError
	if _, err := New(Config{GPUBlocks: 4, WriteQuota: -2}); !errors.As(err, &ce) || ce.Field != "WriteQuota" {
		t.Fatalf("got %v, want a ConfigError naming WriteQuota", err)
	}
}

// TestPinnedPolicyDefault: the pinned tier defaults to LRU when its victims
// are what a tier below receives (a disk or a remote tier, drained on
// eviction), to Adaptive when it is the last tier to hold a block; a policy
// the caller names is kept.
func TestPinnedPolicyDefault(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
		want policy.Kind
	}{
		{"pinned only", Config{GPUBlocks: 4, PinnedBytes: 1 << 20}, policy.Adaptive},
		{"over a disk", Config{GPUBlocks: 4, PinnedBytes: 1 << 20, DiskDir: "d", DiskBytes: 1 << 30}, policy.LRU},
		{"over a remote tier", Config{GPUBlocks: 4, PinnedBytes: 1 << 20, Remote: &RemoteConfig{Addrs: []string{"localhost:1"}}}, policy.LRU},
		{"over a disk written through", Config{GPUBlocks: 4, PinnedBytes: 1 << 20, DiskDir: "d", DiskBytes: 1 << 30, DiskIngestion: IngestAll}, policy.Adaptive},
		{"named by the caller", Config{GPUBlocks: 4, PinnedBytes: 1 << 20, DiskDir: "d", DiskBytes: 1 << 30, PinnedPolicy: policy.ARC}, policy.ARC},
	} {
		c, err := tc.c.withDefaults()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if c.PinnedPolicy != tc.want || c.DiskPolicy != policy.Adaptive {
			t.Errorf("%s: pinned %v, disk %v; want pinned %v, disk adaptive", tc.name, c.PinnedPolicy, c.DiskPolicy, tc.want)
		}
	}
}

// TestRoundTripThroughPinned: blocks written on the GPU go down to pinned memory
// when evicted, and come back byte-exact when the prefix is allocated again.
func TestRoundTripThroughPinned(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Config{GPUBlocks: 8, PinnedBytes: 64 << 20, OffloadAhead: 1})
	a := toks(100, 4*bt)
	r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r)
	writeBlocks(t, m, r.Blocks, a, "")
	if err := commitFree(ctx, m, 1); err != nil {
		t.Fatal(err)
	}
	m.Flush(ctx) // a block being offloaded ahead of need is pinned until its copy is out
	// Fill the GPU with other sequences so a's blocks are evicted.
	for i := 0; i < 3; i++ {
		o := toks(1000*(i+2), 8*bt)
		r, err := m.Allocate(ctx, AllocRequest{Seq: uint64(10 + i), Tokens: o})
		if err != nil {
			st, _ := m.Stats(ctx)
			t.Fatalf("fill %d: %v; %+v %v", i, err, st.Tier(GPU), st.Tier(GPU).Extra)
		}
		wait(t, r)
		commitFree(ctx, m, uint64(10+i))
		m.Flush(ctx)
	}
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p, _ := m.Exists(ctx, a, "")
	if p.Tokens.Of(GPU) != 0 || p.Tokens.Of(Pinned) != 4*bt {
		t.Fatalf("presence %+v, want all of a in pinned memory only", p)
	}
	r, err = m.Allocate(ctx, AllocRequest{Seq: 2, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	if r.Tokens.Of(Pinned) != 4*bt || r.Tokens.Of(GPU) != 0 {
		t.Fatalf("allocation %+v, want 16 tokens loading from pinned", r)
	}
	out := wait(t, r)
	if out.ValidTokens != 4*bt {
		t.Fatalf("outcome %+v", out)
	}
	checkBlocks(t, m, r.Blocks, a, "", 4)
	st, _ := m.Stats(ctx)
	if st.Tier(GPU).Onboarded != 4 || st.Tier(GPU).Offloaded < 4 || st.Tier(Pinned).Hits != 4 {
		t.Fatalf("stats %+v / %+v", st.Tier(GPU), st.Tier(Pinned))
	}
}

func TestGPUOnlyAndErrors(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Config{GPUBlocks: 4})
	r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: toks(0, 2*bt)})
	if err != nil || r.Tokens.Of(GPU) != 0 {
		t.Fatal(r, err)
	}
	if _, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: toks(0, 1)}); err == nil {
		t.Fatal("second allocation of a live sequence accepted")
	}
	if err := m.Commit(ctx, 1, AllTokens); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Allocate(ctx, AllocRequest{Seq: 2, Tokens: toks(0, 9*bt)}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("got %v, want ErrNoSpace", err)
	}
	if _, err := m.Allocate(ctx, AllocRequest{Seq: 3, Tokens: toks(0, 10), MaxSeqLen: 8}); !errors.Is(err, ErrTooLong) {
		t.Fatalf("got %v, want ErrTooLong", err)
	}
	// A negative bound is bad input, refused before anything is held: it
	// was taken as no bound.
	for _, tr := range []bool{false, true} {
		if _, err := m.Allocate(ctx, AllocRequest{Seq: 3, Tokens: toks(0, 10), MaxSeqLen: -1, Truncate: tr}); !errors.Is(err, ErrBadArgument) {
			t.Fatalf("MaxSeqLen -1 (Truncate %v): got %v, want ErrBadArgument", tr, err)
		}
	}
	r, err = m.Allocate(ctx, AllocRequest{Seq: 3, Tokens: toks(0, 10), MaxSeqLen: 8, Truncate: true})
	if err != nil || r.Truncated != 2 || r.Tokens.Of(GPU) != 2*bt {
		t.Fatalf("truncated allocation %+v %v", r, err)
	}
	if err := commitFree(ctx, m, 99); err == nil {
		t.Fatal("free of an unknown sequence accepted")
	}
}

// TestIngestAll writes blocks through as their sequence ends, with no eviction.
func TestIngestAll(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Config{GPUBlocks: 16, PinnedBytes: 1 << 20, Ingestion: IngestAll})
	a := toks(7, 3*bt+1)
	r, _ := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
	writeBlocks(t, m, r.Blocks, a, "")
	commitFree(ctx, m, 1)
	m.Flush(ctx)
	p, _ := m.Exists(ctx, a, "")
	if p.Tokens.Of(Pinned) != 3*bt {
		t.Fatalf("pinned holds %d tokens, want %d", p.Tokens.Of(Pinned), 3*bt)
	}
}

// TestIngestHot writes a block down only after HotHits hits.
func TestIngestHot(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Config{GPUBlocks: 16, PinnedBytes: 1 << 20, Ingestion: IngestHot, HotHits: 2})
	a := toks(7, 2*bt)
	for i := range 3 {
		r, err := m.Allocate(ctx, AllocRequest{Seq: uint64(i), Tokens: a})
		if err != nil {
			t.Fatal(err)
		}
		commitFree(ctx, m, uint64(i))
		m.Flush(ctx)
		p, _ := m.Exists(ctx, a, "")
		want := 0
		if i == 2 { // hits after allocations 2 and 3
			want = 2 * bt
		}
		if p.Tokens.Of(Pinned) != want {
			t.Fatalf("after %d allocations pinned holds %d tokens, want %d (%+v)", i+1, p.Tokens.Of(Pinned), want, r)
		}
	}
}

// TestThresholdOffload: above the threshold, free cached blocks go down ahead of
// need, with no eviction.
func TestThresholdOffload(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Config{GPUBlocks: 10, PinnedBytes: 1 << 20, OffloadThreshold: 0.5, OffloadAhead: 8})
	a := toks(7, 6*bt)
	m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
	commitFree(ctx, m, 1)
	m.Flush(ctx)
	st, _ := m.Stats(ctx)
	if st.Tier(GPU).Evictions != 0 || st.Tier(GPU).Offloaded != 6 {
		t.Fatalf("evictions %d offloaded %d, want 0 and 6", st.Tier(GPU).Evictions, st.Tier(GPU).Offloaded)
	}
	// Below the threshold nothing moves.
	m2 := newManager(t, Config{GPUBlocks: 20, PinnedBytes: 1 << 20, OffloadThreshold: 0.5})
	m2.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
	commitFree(ctx, m2, 1)
	m2.Flush(ctx)
	if st, _ := m2.Stats(ctx); st.Tier(GPU).Offloaded != 0 {
		t.Fatalf("offloaded %d below the threshold", st.Tier(GPU).Offloaded)
	}
}

func evictAll(t *testing.T, m *Manager, blocks int) {
	t.Helper()
	ctx := context.Background()
	r, err := m.Allocate(ctx, AllocRequest{Seq: 999, Tokens: toks(500000, blocks*bt)})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r)
	commitFree(ctx, m, 999)
	m.Flush(ctx)
}

// TestDoubleGet: lower tiers are asked only past the count threshold.
func TestDoubleGet(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Config{GPUBlocks: 8, PinnedBytes: 1 << 20, Ingestion: IngestAll, DoubleGetMinBlocks: 3})
	short, long := toks(1, 2*bt), toks(100, 4*bt)
	for i, s := range [][]int64{short, long} {
		m.Allocate(ctx, AllocRequest{Seq: uint64(i), Tokens: s})
		commitFree(ctx, m, uint64(i))
	}
	m.Flush(ctx)
	evictAll(t, m, 8)
	r, _ := m.Allocate(ctx, AllocRequest{Seq: 10, Tokens: short})
	if r.Tokens.Of(Pinned) != 0 {
		t.Fatalf("2 blocks below were fetched with DoubleGetMinBlocks 3: %+v", r)
	}
	commitFree(ctx, m, 10)
	r, _ = m.Allocate(ctx, AllocRequest{Seq: 11, Tokens: long})
	if r.Tokens.Of(Pinned) != 4*bt {
		t.Fatalf("4 blocks below were not fetched: %+v", r)
	}
	wait(t, r)
	if st, _ := m.Stats(ctx); st.Tier(GPU).DoubleGetSkips != 2 {
		t.Fatalf("double-get skips %d, want 2", st.Tier(GPU).DoubleGetSkips)
	}
}

// slowDevice blocks host-to-device copies until release is closed.
// deadlineConfig is a Manager's Config over dev (slowDevice's) with
// gpuBlocks GPU blocks, 1 MiB of pinned memory that takes every block, and a
// read deadline of 1 ms plus 1 µs a token judged on clk.
func deadlineConfig(dev gpu.Device, gpuBlocks int, clk Clock) Config {
	return Config{BlockTokens: bt, GPUBlocks: gpuBlocks, PinnedBytes: 1 << 20, Ingestion: IngestAll, Device: dev,
		ReadDeadlineBase: time.Millisecond, ReadDeadlinePerToken: time.Microsecond, Clock: clk}
}

func slowDevice(t *testing.T) (gpu.Device, chan struct{}, Clock) {
	release := make(chan struct{})
	clk := &copyStartClock{at: time.Unix(1e9, 0)}
	dev, err := gpu.NewHost(gpu.HostConfig{Fault: func(dir gpu.Direction, ops []gpu.CopyOp) error {
		if dir == gpu.H2D {
			clk.started()
			<-release
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev, release, clk
}

// loadFromPinned caches a (3 blocks) through sequence 1, evicts it from
// the GPU's gpuBlocks blocks so that only pinned memory holds it (under
// IngestAll), and allocates it again as sequence 2: a load of all 3 blocks
// from pinned memory.
func loadFromPinned(t *testing.T, m *Manager, gpuBlocks int, a []int64) AllocResult {
	t.Helper()
	ctx := context.Background()
	m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
	commitFree(ctx, m, 1)
	m.Flush(ctx)
	evictAll(t, m, gpuBlocks)
	r, err := m.Allocate(ctx, AllocRequest{Seq: 2, Tokens: a})
	if err != nil || r.Tokens.Of(Pinned) != 3*bt {
		t.Fatalf("%+v %v", r, err)
	}
	return r
}

// copyStartClock reads a fixed instant until a host-to-GPU copy of its
// slowDevice has started, then runs with the wall clock from an hour later:
// as Config.Clock, the deadline of a load allocated before any copy passes
// only once a copy is under way, however late the pinned tier's grant
// comes on a loaded machine (a 1 ms budget on the wall clock sometimes ran
// out before the grant under -race in CI); later loads get the wall
// clock's budget.
type copyStartClock struct {
	at    time.Time
	start atomic.Pointer[time.Time]
}

func (c *copyStartClock) Now() time.Time {
	if s := c.start.Load(); s != nil {
		return c.at.Add(time.Hour + time.Since(*s))
	}
	return c.at
}

func (c *copyStartClock) started() {
	now := time.Now()
	c.start.CompareAndSwap(nil, &now)
}

// TestReadDeadline: a load slower than its deadline becomes a miss with fresh
// blocks to recompute into, counted, not an error.
func TestReadDeadline(t *testing.T) {
	ctx := context.Background()
	dev, release, clk := slowDevice(t)
	m := newManager(t, deadlineConfig(dev, 12, clk))
	a := toks(3, 3*bt)
	r := loadFromPinned(t, m, 12, a)
	out := wait(t, r)
	if out.ValidTokens != 0 || out.Late != 3 || len(out.Blocks) != 3 {
		t.Fatalf("outcome %+v, want 3 late blocks and a new table", out)
	}
	for i := range out.Blocks {
		if out.Blocks[i] == r.Blocks[i] {
			t.Fatal("a late block was not swapped for a fresh one")
		}
	}
	close(release)
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ := m.Stats(ctx)
	if st.Tier(GPU).Timeouts != 3 {
		t.Fatalf("timeouts %d, want 3", st.Tier(GPU).Timeouts)
	}
	if err := commitFree(ctx, m, 2); err != nil {
		t.Fatal(err)
	}
}

// TestWriteQuota: offloads over the in-flight quota are denied and counted.
func TestWriteQuota(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	dev, _ := gpu.NewHost(gpu.HostConfig{Fault: func(dir gpu.Direction, ops []gpu.CopyOp) error {
		if dir == gpu.D2H {
			<-release
		}
		return nil
	}})
	defer dev.Close()
	m := newManager(t, Config{GPUBlocks: 16, PinnedBytes: 1 << 20, Ingestion: IngestAll, WriteQuota: 2, Device: dev})
	m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: toks(0, 5*bt)})
	commitFree(ctx, m, 1)
	if _, err := m.Stats(ctx); err != nil { // a barrier: the GPU actor handled the grant before Stats
		t.Fatal(err)
	}
	close(release)
	m.Flush(ctx)
	st, _ := m.Stats(ctx)
	if st.Tier(GPU).Denied != 3 || st.Tier(Pinned).Denied != 3 || st.Tier(GPU).Offloaded != 2 {
		t.Fatalf("denied %d/%d offloaded %d, want 3/3 and 2", st.Tier(GPU).Denied, st.Tier(Pinned).Denied, st.Tier(GPU).Offloaded)
	}
}

func TestCloseSemantics(t *testing.T) {
	ctx := context.Background()
	m, err := New(Config{GPUBlocks: 8, BlockTokens: bt, PinnedBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: toks(0, 8)})
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Allocate(ctx, AllocRequest{Seq: 2, Tokens: toks(0, 8)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if err := m.Close(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	m2 := newManager(t, Config{GPUBlocks: 8})
	if _, err := m2.Allocate(cctx, AllocRequest{Seq: 1, Tokens: toks(0, 8)}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
}

// TestConcurrentClients: 32 goroutines drive one Manager; after Flush the totals
// reconcile per tier.
func TestConcurrentClients(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Config{GPUBlocks: 256, PinnedBytes: 256 * 512, OffloadThreshold: 0.5})
	var wg sync.WaitGroup
	errs := make([]error, 32)
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				seq := uint64(g*1000 + i)
				stem := toks((i%4)*100, 2*bt)
				tail := toks(g*100000+i*10, 1+(i%3)*bt)
				r, err := m.Allocate(ctx, AllocRequest{Seq: seq, Tokens: append(stem, tail...), Salt: fmt.Sprint(g % 3)})
				if errors.Is(err, ErrNoSpace) {
					continue
				}
				if err != nil {
					errs[g] = err
					return
				}
				<-r.Ready.Done()
				if _, err := m.Append(ctx, seq, []int64{1, 2}); err != nil && !errors.Is(err, ErrNoSpace) {
					errs[g] = err
					return
				}
				if err := commitFree(ctx, m, seq); err != nil {
					errs[g] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for g, err := range errs {
		if err != nil {
			t.Fatalf("goroutine %d: %v", g, err)
		}
	}
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ := m.Stats(ctx)
	g, p := st.Tier(GPU), st.Tier(Pinned)
	if f := int(g.Extra["free"]); f != g.Blocks || g.Extra["sequences"] != 0 {
		t.Fatalf("GPU: %d free of %d with %v sequences live", f, g.Blocks, g.Extra["sequences"])
	}
	if p.InFlight != 0 || p.UsedBlocks != int(p.Extra["resident"]) || st.IndexBlocks != p.UsedBlocks {
		t.Fatalf("pinned: %+v, index %d", p, st.IndexBlocks)
	}
}

// TestAllocationWaitsForAheadOfNeedCopies: blocks pinned by an offload ahead of
// need are not "no space": the allocation waits for their copy instead.
func TestAllocationWaitsForAheadOfNeedCopies(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	dev, err := gpu.NewHost(gpu.HostConfig{Fault: func(dir gpu.Direction, ops []gpu.CopyOp) error {
		if dir == gpu.D2H {
			<-release
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	m := newManager(t, Config{GPUBlocks: 10, PinnedBytes: 1 << 20, OffloadThreshold: 0.5, OffloadAhead: 8, Device: dev})
	if _, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: toks(0, 8*bt)}); err != nil {
		t.Fatal(err)
	}
	if err := commitFree(ctx, m, 1); err != nil { // 8 cached free blocks: offloaded ahead of need, pinned
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := m.Allocate(ctx, AllocRequest{Seq: 2, Tokens: toks(1000, 10*bt)})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("allocation answered while its blocks were pinned: %v", err)
	default:
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("allocation after the copies: %v", err)
	}
}

// TestStep: one message frees, appends and allocates, in that order.
func TestStep(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Config{GPUBlocks: 4})
	if _, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: toks(0, 2*bt)}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Allocate(ctx, AllocRequest{Seq: 2, Tokens: toks(100, bt)}); err != nil {
		t.Fatal(err)
	}
	// 3 of 4 blocks are held; freeing seq 1 first makes room for seq 3's 2 blocks
	// after seq 2's append takes one.
	r, err := m.Step(ctx, StepRequest{Free: []uint64{1, 99}, Append: []AppendItem{{Seq: 2, Tokens: []int64{7}}},
		Allocate: []AllocRequest{{Seq: 3, Tokens: toks(200, 2*bt)}, {Seq: 4, Tokens: nil}}})
	if err != nil {
		t.Fatal(err)
	}
	if r.FreeErrs[0] != nil || r.FreeErrs[1] == nil || r.Appends[0].Err != nil {
		t.Fatalf("free %v append %v", r.FreeErrs, r.Appends)
	}
	if r.Allocs[0].Err != nil || len(r.Allocs[0].Blocks) != 2 || r.Allocs[1].Err == nil {
		t.Fatalf("allocations %+v", r.Allocs)
	}
	st, _ := m.Stats(ctx)
	if st.Tier(GPU).Extra["free"] != 0 {
		t.Fatalf("free blocks %v, want 0", st.Tier(GPU).Extra["free"])
	}
}

// TestSwap: swapping a sequence out writes its full blocks to pinned memory and
// frees it; a readmission finds them there once the GPU has evicted them.
func TestSwap(t *testing.T) {
	ctx := context.Background()
	if _, err := newManager(t, Config{GPUBlocks: 4}).Swap(ctx, []uint64{1}); !errors.Is(err, ErrNoLowerTier) {
		t.Fatalf("swap without a pinned tier: %v", err)
	}
	m := newManager(t, Config{GPUBlocks: 8, PinnedBytes: 1 << 20, OffloadThreshold: 1})
	a := toks(50, 3*bt+2)
	r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r)
	writeBlocks(t, m, r.Blocks, a, "")
	if err := m.Commit(ctx, 1, AllTokens); err != nil {
		t.Fatal(err)
	}
	errs, err := m.Swap(ctx, []uint64{1, 2})
	if err != nil || errs[0] != nil || !errors.Is(errs[1], blockpool.ErrUnknownSequence) {
		t.Fatalf("swap: %v %v", errs, err)
	}
	m.Flush(ctx)
	if p, _ := m.Exists(ctx, a, ""); p.Tokens.Of(Pinned) != 3*bt || p.Tokens.Of(GPU) != 3*bt {
		t.Fatalf("after swap %+v, want 3 full blocks on GPU and in pinned memory", p)
	}
	evictAll(t, m, 8)
	r, err = m.Allocate(ctx, AllocRequest{Seq: 3, Tokens: a})
	if err != nil || r.Tokens.Of(Pinned) != 3*bt {
		t.Fatalf("readmission %+v %v", r, err)
	}
	wait(t, r)
	checkBlocks(t, m, r.Blocks, a, "", 3)
}

// commitFree commits every token of seq (its KV was computed), then frees it.
func commitFree(ctx context.Context, m *Manager, seq uint64) error {
	if err := m.Commit(ctx, seq, AllTokens); err != nil {
		return err
	}
	return m.Free(ctx, seq)
}

// cycle allocates req, waits for its loads, commits all of it, frees it and
// flushes: a request run to its end.
func cycle(t *testing.T, m *Manager, req AllocRequest) AllocResult {
	t.Helper()
	ctx := context.Background()
	r, err := m.Allocate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r)
	if err := commitFree(ctx, m, req.Seq); err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

// jumpClock is wall time until jumping is set; then every reading is an hour
// later than the one before.
type jumpClock struct {
	jumping atomic.Bool
	at      atomic.Int64
}

func (c *jumpClock) Now() time.Time {
	if !c.jumping.Load() {
		return time.Now()
	}
	return time.Unix(0, c.at.Add(int64(time.Hour)))
}

// TestLoadDeadlinesFollowConfigClock: load deadlines are set and judged on
// Config.Clock, not the wall clock: with a clock that runs an hour per
// reading, a load with an hour's budget is late however fast the copy is.
func TestLoadDeadlinesFollowConfigClock(t *testing.T) {
	ctx := context.Background()
	clk := &jumpClock{}
	clk.at.Store(time.Now().UnixNano())
	m := newManager(t, Config{GPUBlocks: 4, PinnedBytes: 16 * 4096, ReadDeadlineBase: time.Hour, Clock: clk})
	a := toks(100, 2*bt)
	cycle(t, m, AllocRequest{Seq: 1, Tokens: a})
	for i := range 4 { // a leaves the GPU for pinned memory
		cycle(t, m, AllocRequest{Seq: uint64(10 + i), Tokens: toks(1000*(i+2), 2*bt)})
	}
	if p, err := m.Exists(ctx, a, ""); err != nil || p.Tokens.Of(GPU) != 0 || p.Tokens.Of(Pinned) != 2*bt {
		t.Fatalf("a is not (only) in pinned memory: %+v %v", p, err)
	}
	clk.jumping.Store(true)
	r, err := m.Allocate(ctx, AllocRequest{Seq: 4, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	if r.Tokens.Of(Pinned) != 2*bt {
		t.Fatalf("a was not loaded from pinned memory: %+v", r)
	}
	if out := wait(t, r); out.Late == 0 || out.ValidTokens != r.Tokens.Of(GPU) {
		t.Fatalf("outcome %+v: a load with an hour's budget on a clock running an hour a reading was not late", out)
	}
}

// TestQueriesRefuseTokensOutsideVocabulary: Exists, Lookup, Delete and
// Prefetch refuse a token outside [0, VocabSize) with ErrTokenOutOfRange, as
// Allocate does, and change nothing: the chain stays cached on every tier.
// They accepted such tokens silently (a caller whose tokenizer disagreed
// with the model heard of nothing but misses).
func TestQueriesRefuseTokensOutsideVocabulary(t *testing.T) {
	ctx := context.Background()
	const vocab = 1000
	m := newManager(t, Config{GPUBlocks: 8, PinnedBytes: 1 << 20, VocabSize: vocab, Ingestion: IngestAll})
	a := toks(7, 2*bt)
	r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	writeBlocks(t, m, r.Blocks, a, "")
	commitFree(ctx, m, 1)
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []int64{-1, vocab} {
		b := append([]int64(nil), a...)
		b[len(b)-1] = bad
		if _, err := m.Exists(ctx, b, ""); !errors.Is(err, ErrTokenOutOfRange) {
			t.Errorf("Exists with token %d: got %v, want ErrTokenOutOfRange", bad, err)
		}
		if _, err := m.Lookup(ctx, LookupRequest{Tokens: b}); !errors.Is(err, ErrTokenOutOfRange) {
			t.Errorf("Lookup with token %d: got %v, want ErrTokenOutOfRange", bad, err)
		}
		if n, err := m.Delete(ctx, b, ""); !errors.Is(err, ErrTokenOutOfRange) || n != 0 {
			t.Errorf("Delete with token %d: dropped %d, got %v, want ErrTokenOutOfRange", bad, n, err)
		}
		if _, err := m.Prefetch(ctx, b, ""); !errors.Is(err, ErrTokenOutOfRange) {
			t.Errorf("Prefetch with token %d: got %v, want ErrTokenOutOfRange", bad, err)
		}
	}
	p, err := m.Exists(ctx, a, "")
	if err != nil {
		t.Fatal(err)
	}
	if p.Tokens.Of(GPU) != 2*bt || p.Tokens.Of(Pinned) != 2*bt {
		t.Fatalf("after the refused queries the chain is held as %+v, want %d tokens on the GPU and in pinned memory", p.Tokens, 2*bt)
	}
}
