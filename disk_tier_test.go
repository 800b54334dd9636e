package kvtier

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvtier/kvtier/disk"
	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/policy"
)

// diskConfig: 8 GPU blocks, 4 pinned slots, a disk tier of 256 blocks.
func diskConfig(t *testing.T, dir string) Config {
	m0, err := New(Config{GPUBlocks: 1, BlockTokens: bt})
	if err != nil {
		t.Fatal(err)
	}
	bb := int64(m0.Layout().BlockBytes())
	m0.Close(context.Background())
	return Config{GPUBlocks: 8, BlockTokens: bt, PinnedBytes: 8 * 4096, DiskDir: dir, DiskBytes: 256 * (bb + 8192), OffloadAhead: 2,
		ReadDeadlineBase: time.Minute}
}

// pushDown writes a's blocks on the GPU, then churns other sequences through
// until a is only on disk.
func pushDown(t *testing.T, m *Manager, a []int64) {
	t.Helper()
	pushDownFinished(t, m, AllocRequest{Seq: 1, Tokens: a}, 0)
}

// pushDownFinished is pushDown of req (its Tokens a), whose finishing
// commit gives class (CommitItem.Class) when it is not 0.
func pushDownFinished(t *testing.T, m *Manager, req AllocRequest, class uint8) {
	t.Helper()
	ctx := context.Background()
	a := req.Tokens
	r, err := m.Allocate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r)
	writeBlocks(t, m, r.Blocks, a, "")
	if class != 0 {
		errs, err := m.CommitBatch(ctx, []CommitItem{{Seq: req.Seq, Tokens: AllTokens, Class: class}})
		if err != nil || errs[0] != nil {
			t.Fatalf("finishing commit: %v %v", err, errs)
		}
	}
	commitFree(ctx, m, req.Seq)
	m.Flush(ctx)
	for i := range 6 {
		o := toks(10000*(i+2), 8*bt)
		r, err := m.Allocate(ctx, AllocRequest{Seq: uint64(10 + i), Tokens: o})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, r)
		commitFree(ctx, m, uint64(10+i))
		m.Flush(ctx)
	}
	p, err := m.Exists(ctx, a, "")
	if err != nil {
		t.Fatal(err)
	}
	if p.Tokens.Of(GPU) != 0 || p.Tokens.Of(Pinned) != 0 || p.Tokens.Of(Disk) != len(a) {
		st, _ := m.Stats(ctx)
		t.Fatalf("presence %+v, want a on disk only\n%v\n%v\n%v", p, st.Tier(GPU), st.Tier(Pinned), st.Tier(Disk))
	}
}

func TestRoundTripThroughDisk(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, diskConfig(t, t.TempDir()))
	a := toks(100, 4*bt)
	pushDown(t, m, a)
	r, err := m.Allocate(ctx, AllocRequest{Seq: 2, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	if r.Tokens.Of(Disk) != 4*bt {
		t.Fatalf("allocation %+v, want 16 tokens loading from disk", r)
	}
	if out := wait(t, r); out.ValidTokens != 4*bt {
		t.Fatalf("outcome %+v", out)
	}
	checkBlocks(t, m, r.Blocks, a, "", 4)
	st, _ := m.Stats(ctx)
	if st.Tier(Disk).Onboarded != 4 || st.Tier(Pinned).Onboarded != 4 || st.Tier(GPU).Onboarded != 4 {
		t.Fatalf("onboarded disk %d pinned %d gpu %d, want 4 each", st.Tier(Disk).Onboarded, st.Tier(Pinned).Onboarded, st.Tier(GPU).Onboarded)
	}
}

// TestDiskSurvivesRestart: a new Manager on the same directory serves the blocks
// an earlier one wrote, byte-exact; a second opener is refused while one is open.
func TestDiskSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := diskConfig(t, dir)
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := toks(100, 4*bt)
	pushDown(t, m, a)
	if _, err := New(cfg); !errors.Is(err, disk.ErrLocked) {
		t.Fatalf("second opener: %v, want disk.ErrLocked", err)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m2 := newManager(t, cfg)
	st, _ := m2.Stats(ctx)
	if st.DiskOpen.Records < 4 {
		t.Fatalf("reopen found %d records", st.DiskOpen.Records)
	}
	if p, _ := m2.Exists(ctx, a, ""); p.Tokens.Of(Disk) != len(a) {
		t.Fatalf("after restart presence %+v", p)
	}
	r, err := m2.Allocate(ctx, AllocRequest{Seq: 2, Tokens: a})
	if err != nil || r.Tokens.Of(Disk) != len(a) {
		t.Fatalf("%+v %v", r, err)
	}
	wait(t, r)
	checkBlocks(t, m2, r.Blocks, a, "", 4)
}

// TestRestartFirstAllocationFindsDisk: the first call on a reopened Manager,
// an allocation, already finds the blocks the disk reopened (New returns
// once the prefix index knows them), restart after restart.
func TestRestartFirstAllocationFindsDisk(t *testing.T) {
	ctx := context.Background()
	cfg := diskConfig(t, t.TempDir())
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := toks(100, 4*bt)
	pushDown(t, m, a)
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for round := range 10 {
		m, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
		if err != nil || r.Tokens.Of(Disk) != len(a) {
			t.Fatalf("round %d: first allocation after the restart: %v, %v; want %d tokens from disk", round, r.Tokens, err, len(a))
		}
		if out := wait(t, r); out.ValidTokens != len(a) {
			t.Fatalf("round %d: outcome %+v", round, out)
		}
		if err := m.Free(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if err := m.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDiskHearsItsMisses: a request that found nothing below, once
// computed (committed), tells a disk whose policy learns from misses
// (Adaptive, the default) about every block; a disk whose policy does not
// (LRU) hears nothing, and the GPU tier keeps nothing for it.
func TestDiskHearsItsMisses(t *testing.T) {
	ctx := context.Background()
	for _, pol := range []policy.Kind{policy.Adaptive, policy.LRU} {
		cfg := diskConfig(t, t.TempDir())
		cfg.DiskPolicy = pol
		m := newManager(t, cfg)
		a := toks(300, 4*bt)
		r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, r)
		if err := m.Commit(ctx, 1, AllTokens); err != nil {
			t.Fatal(err)
		}
		want := 0.0
		if pol == policy.Adaptive {
			want = 4
		}
		var got float64
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			st, err := m.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got = st.Tier(Disk).Extra["misses_observed"]; got >= want || time.Now().After(deadline) {
				break
			}
		}
		if got != want {
			t.Fatalf("disk policy %v: %v misses observed, want %v", pol, got, want)
		}
	}
}

func TestPrefetchFromDisk(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, diskConfig(t, t.TempDir()))
	a := toks(100, 3*bt)
	pushDown(t, m, a)
	n, err := m.Prefetch(ctx, a, "")
	if err != nil || n != len(a) {
		t.Fatalf("prefetch brought %d tokens, %v", n, err)
	}
	if p, _ := m.Exists(ctx, a, ""); p.Tokens.Of(Pinned) != len(a) {
		t.Fatalf("after prefetch %+v", p)
	}
	r, _ := m.Allocate(ctx, AllocRequest{Seq: 5, Tokens: a})
	if r.Tokens.Of(Pinned) != len(a) {
		t.Fatalf("prefetched blocks not served from pinned: %+v", r)
	}
	if out := wait(t, r); out.ValidTokens != len(a) {
		t.Fatalf("prefetched blocks did not all load: %+v", out)
	}
	checkBlocks(t, m, r.Blocks, a, "", 3)
	if n, _ := m.Delete(ctx, a, ""); n == 0 {
		t.Fatal("delete dropped nothing")
	}
}

func TestDiskConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{GPUBlocks: 4, DiskDir: "x", DiskBytes: 1 << 20},         // no pinned tier
		{GPUBlocks: 4, PinnedBytes: 1 << 20, DiskDir: "x"},       // no DiskBytes
		{GPUBlocks: 4, PinnedBytes: 1 << 20, DiskBytes: 1 << 20}, // no DiskDir
		{GPUBlocks: 4, PinnedBytes: 1 << 20, DiskDir: "x", DiskBytes: 1, DiskIngestion: 7},
	} {
		if _, err := New(c); !errors.Is(err, ErrBadConfig) {
			t.Fatalf("%+v: %v", c, err)
		}
	}
}

// TestDiskIngestAll: with DiskIngestion IngestAll every block committed to
// pinned memory is written through to disk, with no pinned eviction needed.
func TestDiskIngestAll(t *testing.T) {
	ctx := context.Background()
	cfg := diskConfig(t, t.TempDir())
	cfg.PinnedBytes = 64 * 4096
	cfg.Ingestion, cfg.DiskIngestion = IngestAll, IngestAll
	m := newManager(t, cfg)
	a := toks(100, 3*bt)
	r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r)
	commitFree(ctx, m, 1)
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p, _ := m.Exists(ctx, a, "")
	if p.Tokens.Of(GPU) != len(a) || p.Tokens.Of(Pinned) != len(a) || p.Tokens.Of(Disk) != len(a) {
		t.Fatalf("presence %+v, want the chain in every tier", p)
	}
	if st, _ := m.Stats(ctx); st.Tier(Pinned).Evictions != 0 {
		t.Fatalf("pinned evicted %d blocks", st.Tier(Pinned).Evictions)
	}
}

// TestDiskIngestHot: with DiskIngestion IngestHot a pinned block goes to disk
// only after HotHits fetches from pinned memory.
func TestDiskIngestHot(t *testing.T) {
	ctx := context.Background()
	cfg := diskConfig(t, t.TempDir())
	cfg.GPUBlocks, cfg.PinnedBytes = 4, 64*4096
	cfg.Ingestion, cfg.DiskIngestion, cfg.HotHits = IngestAll, IngestHot, 2
	m := newManager(t, cfg)
	a := toks(100, 2*bt)
	onDisk := func() int {
		m.Flush(ctx)
		p, _ := m.Exists(ctx, a, "")
		return p.Tokens.Of(Disk)
	}
	for i := range 3 {
		r, err := m.Allocate(ctx, AllocRequest{Seq: uint64(i), Tokens: a})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, r)
		commitFree(ctx, m, uint64(i))
		evictAll(t, m, 4) // push a off the GPU so the next allocation fetches it from pinned
		want := 0
		if i == 2 { // fetched from pinned at allocations 2 and 3
			want = len(a)
		}
		if got := onDisk(); got != want {
			t.Fatalf("after %d allocations disk holds %d tokens, want %d", i+1, got, want)
		}
	}
}

// TestAttachToActorSystem: kvtier's actors can live in the caller's actor system,
// which Close leaves running.
func TestAttachToActorSystem(t *testing.T) {
	ctx := context.Background()
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	m, err := New(Config{GPUBlocks: 8, BlockTokens: bt, PinnedBytes: 1 << 20, System: sys})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: toks(0, 2*bt)}); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if sys.IsStopped() {
		t.Fatal("Close stopped the caller's actor system")
	}
}

// TestSmallPinnedTierAboveDiskStillHolds: the pinned tier keeps at most a
// quarter of its slots free ahead of need; a 16-slot tier above a disk used
// to keep all of them free (OffloadAhead 64) and drained every block.
func TestSmallPinnedTierAboveDiskStillHolds(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Config{GPUBlocks: 8, PinnedBytes: 16 * 4096, DiskDir: t.TempDir(), DiskBytes: 64 << 20})
	var prompts [][]int64
	for i := range 6 {
		p := toks(1000*(i+1), 2*bt)
		prompts = append(prompts, p)
		r, err := m.Allocate(ctx, AllocRequest{Seq: uint64(i + 1), Tokens: p})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, r)
		if err := m.Commit(ctx, uint64(i+1), AllTokens); err != nil {
			t.Fatal(err)
		}
		if err := m.Free(ctx, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, p := range prompts {
		pr, err := m.Exists(ctx, p, "")
		if err != nil {
			t.Fatal(err)
		}
		held += pr.Tokens.Of(Pinned)
	}
	if held == 0 {
		t.Fatal("the pinned tier holds nothing: it drained every block to disk")
	}
	if got := freeTarget(64, 16); got != 4 {
		t.Fatalf("freeTarget(64, 16) = %d, want 4", got)
	}
}

// TestStatsTiersTopFirst: Stats.Tiers walks the configured tiers top first,
// each naming its tier; Stats.Tier finds each of them, and answers for a tier
// not configured with zero stats that name it.
func TestStatsTiersTopFirst(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		cfg  Config
		want []messages.Tier
	}{
		{Config{GPUBlocks: 4}, []messages.Tier{messages.GPU}},
		{Config{GPUBlocks: 4, PinnedBytes: 4 * 4096}, []messages.Tier{messages.GPU, messages.Pinned}},
		{Config{GPUBlocks: 4, PinnedBytes: 4 * 4096, DiskDir: t.TempDir(), DiskBytes: 1 << 20}, []messages.Tier{messages.GPU, messages.Pinned, messages.Disk}},
	} {
		st, err := newManager(t, c.cfg).Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []messages.Tier
		for _, ts := range st.Tiers {
			got = append(got, ts.Tier)
		}
		if !slices.Equal(got, c.want) {
			t.Fatalf("tiers %v, want %v", got, c.want)
		}
		for _, w := range []Tier{GPU, Pinned, Disk, Remote} {
			ts := st.Tier(w)
			if on := slices.Contains(c.want, w); ts.Tier != w || on != (ts.Blocks > 0) || !on && !reflect.DeepEqual(ts, TierStats{Tier: w}) {
				t.Fatalf("with tiers %v, Tier(%v) = %+v", c.want, w, ts)
			}
		}
	}
}

// TestDiskLearnsMissesOfComputedRequestsOnly: the disk's eviction policy
// (Adaptive, which learns from misses) hears of the blocks a request missed
// below once the engine commits it: a request refused for lack of GPU
// blocks, or given blocks and freed unused (a scheduler keeping its order
// does that), is tried again later and counts nothing until then.
func TestDiskLearnsMissesOfComputedRequestsOnly(t *testing.T) {
	m := newManager(t, diskConfig(t, t.TempDir()))
	ctx := context.Background()
	bt := m.Layout().BlockTokens()
	if _, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: toks(1000, 6*bt)}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Allocate(ctx, AllocRequest{Seq: 2, Tokens: toks(2000, 4*bt)}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("4 blocks with 2 of 8 free: %v, want ErrNoSpace", err)
	}
	if _, err := m.Allocate(ctx, AllocRequest{Seq: 4, Tokens: toks(4000, bt)}); err != nil {
		t.Fatal(err)
	}
	if err := m.Free(ctx, 4); err != nil { // freed unused
		t.Fatal(err)
	}
	if _, err := m.Allocate(ctx, AllocRequest{Seq: 3, Tokens: toks(3000, bt)}); err != nil {
		t.Fatal(err)
	}
	for _, seq := range []uint64{1, 3} {
		if err := m.Commit(ctx, seq, AllTokens); err != nil {
			t.Fatal(err)
		}
	}
	// The index tells the disk in order: once the third request's one
	// block is counted, the others' would have been.
	var seen float64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		st, err := m.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if seen = st.Tier(Disk).Extra["misses_observed"]; seen >= 7 || time.Now().After(deadline) {
			break
		}
	}
	if seen != 7 {
		t.Fatalf("the disk observed %v misses, want 7: the two computed requests' 6 and 1 blocks", seen)
	}
}
