package stress

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/internal/xxforge"
	"github.com/kvtier/kvtier/prefixhash"
)

// namespaceKey is the key of m's namespace for salt (no LoRA), the string
// whose prefixhash.Seed precedes a chain's first block: what manager.go's
// namespace and fingerprint compute. forgery checks it against the hashes
// m reports (Residency), so a change there fails loudly rather than
// leaving the forged chains colliding with nothing.
func namespaceKey(m *kvtier.Manager, cfg kvtier.Config, salt string) string {
	model := cfg.Model
	if model == (gpu.ModelSpec{}) {
		model = gpu.TinySpec
	}
	fp := xxhash.Sum64String(fmt.Sprintf("kvtier/%d/%+v/%d/%d/%q", prefixhash.SchemeVersion, model, m.BlockTokens(), m.Layout().BlockBytes(), cfg.ModelID))
	return prefixhash.Namespace{Salt: salt, Model: cfg.ModelID, Layout: fmt.Sprintf("%016x", fp)}.Key()
}

// forgeries holds, per attacking tenant, forged prompts: each differs from
// a victim's stem in every block, its token ids far outside any
// vocabulary, and its chained xxh64 block hashes, in the attacker's
// namespace, equal the victim's in the victim's namespace. own[t][i]
// collides with tenant t's own stem i (same namespace: only the tokens
// tell them apart on the GPU); cross[t][i] with stem i of tenant t+1 (the
// namespace and the prefix digest tell them apart).
type forgeries struct {
	own, cross [][][]int64
}

// forge builds the forged prompts for m, after checking namespaceKey
// against what m hashes: k (of tenant 0) commits stem 0, and the GPU's
// residency must hold its chain's hashes.
func forge(t *testing.T, ctx context.Context, m *kvtier.Manager, cfg kvtier.Config, k *worker) *forgeries {
	t.Helper()
	var h prefixhash.Hasher
	ns := make([]string, tenants)
	for i := range ns {
		ns[i] = namespaceKey(m, cfg, salt(i))
	}
	k.next++
	if err := k.allocate(ctx, uint64(k.g)<<32|k.next, stem(0), false /* wantMiss */); err != nil {
		t.Fatal(err)
	}
	if err := k.free(ctx, 0); err != nil {
		t.Fatal(err)
	}
	res, err := m.Residency(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range h.Chain(nil, ns[0], stem(0), bt) {
		if _, found := slices.BinarySearch(res[kvtier.GPU], uint64(x)); !found {
			t.Fatalf("the GPU does not hold hash %x of tenant 0's committed stem 0: namespaceKey no longer derives the Manager's namespace (manager.go: namespace, fingerprint)", uint64(x))
		}
	}
	r := rand.New(rand.NewPCG(11, 11))
	chain := func(attacker, victim int, tokens []int64) []int64 {
		want := h.Chain(nil, ns[victim], tokens, bt)
		prev, hasPrev := prefixhash.Seed(ns[attacker])
		var out []int64
		for i := range want {
			a := make([]int64, bt)
			for j := range a {
				a[j] = 3<<40 + r.Int64N(1<<30)
			}
			b, err := xxforge.ForgeBlock(prev, hasPrev, a, want[i])
			if err != nil {
				t.Fatalf("forging block %d: %v", i, err)
			}
			out = append(out, b...)
			prev, hasPrev = want[i], true
		}
		if got := h.Chain(nil, ns[attacker], out, bt); !slices.Equal(got, want) {
			t.Fatal("the forged chain does not collide")
		}
		return out
	}
	f := &forgeries{own: make([][][]int64, tenants), cross: make([][][]int64, tenants)}
	for a := range tenants {
		for i := range numStems {
			f.own[a] = append(f.own[a], chain(a, a, stem(i)))
			f.cross[a] = append(f.cross[a], chain(a, (a+1)%tenants, stem(i)))
		}
	}
	return f
}

// pick is a worker's prompt stem under forgery: its tenant's shared stem
// (a victim) half the time, else a forgery of one, its own tenant's or the
// next tenant's. The worker may append to what it returns.
func (f *forgeries) pick(k *worker) []int64 {
	i := k.rng.IntN(numStems)
	switch r := k.rng.IntN(10); {
	case r < 5:
		return stem(i)
	case r < 8:
		return slices.Clone(f.own[k.tenant][i])
	default:
		return slices.Clone(f.cross[k.tenant][i])
	}
}

// TestForgedCollisions runs the stress load with forged 64-bit hash
// collisions among the prompts: every tenant sends its shared stems and
// prompts forged to collide with them, in its own namespace and in the
// next tenant's. No reader may be served a block whose bytes are not its
// own prefix's KV, from any tier (every hit and load is checked against
// the block's content, which follows its tokens, not its hash); the
// collisions must reach the digest checks (pinned and disk count
// mismatches); and after the load each tenant's victims still hit on the
// GPU next to the forged blocks that share their hashes.
func TestForgedCollisions(t *testing.T) {
	deadline(t)
	for _, tc := range []struct {
		name string
		cfg  kvtier.Config
	}{
		{"pinned", kvtier.Config{Ingestion: kvtier.IngestAll}},
		{"disk", kvtier.Config{PinnedBytes: 48 << 12, DiskBytes: 4096 * (8 << 10)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg.DiskBytes > 0 {
				tc.cfg.DiskDir = t.TempDir()
			}
			runForged(t, tc.cfg)
		})
	}
}

func runForged(t *testing.T, cfg kvtier.Config) {
	goroutines := max(envInt(t, "KVTIER_STRESS_GOROUTINES", 64)/2, tenants)
	ops := envInt(t, "KVTIER_STRESS_OPS", 100)
	const phases = 2
	ctx, cancel := context.WithTimeout(context.Background(), hangAfter)
	defer cancel()
	m := newManager(t, cfg)
	defer closeManager(t, m)
	w := &writers{}
	ws := make([]*worker, goroutines)
	for g := range ws {
		ws[g] = newWorker(m, w, g, tenants, 3)
	}
	f := forge(t, ctx, m, cfg, ws[0])
	for _, k := range ws {
		k.pick = f.pick
	}
	var st kvtier.Stats
	for p := range phases {
		name := fmt.Sprintf("forged phase %d", p)
		failOn(t, name, runPhase(ctx, ws, ops, randomPhase))
		c := sumCounts(ws)
		st = checkQuiescent(t, ctx, m, name, &c)
	}
	c := sumCounts(ws)
	mism := st.Tier(kvtier.Pinned).Mismatches + uint64(st.Tier(kvtier.Disk).Extra["verify_mismatch"])
	if c.verifiedHit == 0 || c.verifiedOnboard == 0 || mism == 0 {
		t.Errorf("a path was not exercised: %d GPU hits and %d loads verified, %d digest mismatches below the GPU", c.verifiedHit, c.verifiedOnboard, mism)
	}
	// Each tenant's victims, then its squatters: both hit on the GPU, each
	// its own blocks, whichever committed first.
	k := newWorker(m, w, goroutines, tenants, 4) // tenant goroutines % tenants
	for tn := range tenants {
		k.tenant = tn
		for i := range 2 {
			victim, squat := stem(i), f.own[tn][i]
			if tn%2 == 1 {
				victim, squat = squat, victim // the squatter commits first
			}
			for round, p := range [][]int64{victim, squat, victim, squat} {
				k.next++
				if err := k.allocate(ctx, uint64(k.g)<<32|k.next, p, false /* wantMiss */); err != nil {
					t.Fatalf("tenant %d stem %d round %d: %v", tn, i, round, err)
				}
				if err := k.free(ctx, 0); err != nil {
					t.Fatal(err)
				}
				if round >= 2 && k.lastGPU != len(p) {
					t.Fatalf("tenant %d stem %d round %d: a prompt committed just before hits %d of its %d tokens on the GPU: the block sharing its hashes keeps it out", tn, i, round, k.lastGPU, len(p))
				}
			}
		}
	}
	t.Logf("%d goroutines x %d phases: %d ops, %d allocations; blocks: %d written, %d verified (%d GPU hits, %d loads), %d hits skipped while written; mismatches: pinned %d, disk %v; %v; %v; %v",
		goroutines, phases, c.ops, c.allocs, c.written, c.verified, c.verifiedHit, c.verifiedOnboard, c.skippedBusy,
		st.Tier(kvtier.Pinned).Mismatches, st.Tier(kvtier.Disk).Extra["verify_mismatch"], st.Tier(kvtier.GPU), st.Tier(kvtier.Pinned), st.Tier(kvtier.Disk))
}

// TestForgedSquatterBelowTheGPU: a tenant that writes a forged chain down
// first does not keep its victim's prompt, the same hashes under another
// digest, out of pinned memory: the victim's write-through displaces the
// forged blocks (a counted mismatch) instead of being denied, so once the
// GPU lets the victim's blocks go its prompt is loaded, not recomputed.
// The pinned tier used to keep the first writer of a hash; the GPU pool
// keeps several holders of a hash for the same reason (blockpool:
// TestForgedSquatterDoesNotDenyVictimCache).
func TestForgedSquatterBelowTheGPU(t *testing.T) {
	deadline(t)
	ctx, cancel := context.WithTimeout(context.Background(), hangAfter)
	defer cancel()
	for _, squat := range []bool{false, true} {
		if held := squatterRun(t, ctx, squat); held.Of(kvtier.Pinned) != len(stem(1)) {
			t.Errorf("squatter first %t: the victim's committed prompt, evicted from the GPU, is held %v: pinned memory kept it out", squat, held)
		}
	}
}

// squatterRun commits tenant 0's stem 1 (after a forgery of it, with
// squat) on a new Manager, evicts it from the GPU and returns where it is
// held.
func squatterRun(t *testing.T, ctx context.Context, squat bool) kvtier.TierTokens {
	cfg := kvtier.Config{Ingestion: kvtier.IngestAll}
	m := newManager(t, cfg)
	defer closeManager(t, m)
	k := newWorker(m, &writers{}, 0, tenants, 1)
	f := forge(t, ctx, m, cfg, k)
	p := newProber(m)
	run := func(tokens []int64) {
		t.Helper()
		k.next++
		if err := k.allocate(ctx, k.next, tokens, false /* wantMiss */); err != nil {
			t.Fatal(err)
		}
		if err := k.free(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	victim := stem(1)
	if squat {
		run(f.own[0][1]) // the squatter, written through first
		// and resident in pinned memory: an offer of a hash whose copy
		// into pinned memory is still in flight is denied whoever makes it
		if err := m.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	run(victim)
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Every GPU block to a fresh prompt never committed: the victim's
	// blocks leave the GPU.
	s, _, err := p.alloc(ctx, p.fresh(st.Tier(kvtier.GPU).Blocks), false /* commit */)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Free(ctx, s); err != nil {
		t.Fatal(err)
	}
	pr, err := m.Exists(ctx, victim, salt(0))
	if err != nil {
		t.Fatal(err)
	}
	return pr.Tokens
}
