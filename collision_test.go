package kvtier

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvtier/kvtier/internal/xxforge"
	"github.com/kvtier/kvtier/prefixhash"
)

// forgeChain returns tokens, different from victim's in every block, whose
// chained xxh64 hashes in m's namespace equal victim's: a forged collision.
func forgeChain(t *testing.T, m *Manager, victim []int64) []int64 {
	t.Helper()
	var h prefixhash.Hasher
	ns := m.namespace("", "")
	want := h.Chain(nil, ns, victim, bt)
	prev, hasPrev := prefixhash.Seed(ns)
	r := rand.New(rand.NewPCG(5, 6))
	var forged []int64
	for i := range want {
		vb := victim[i*bt : (i+1)*bt]
		attacker := make([]int64, bt)
		for j := range attacker {
			attacker[j] = r.Int64N(1 << 20)
		}
		var fb []int64
		var err error
		if xxforge.Solvable(hasPrev, bt) {
			fb, err = xxforge.ForgeBlock(prev, hasPrev, attacker, want[i])
		} else {
			fb, err = xxforge.Collide(prev, hasPrev, vb, attacker)
		}
		if err != nil {
			t.Fatalf("forging block %d: %v", i, err)
		}
		if slices.Equal(fb, vb) {
			t.Fatalf("block %d: the forged block equals the victim's", i)
		}
		forged = append(forged, fb...)
		prev, hasPrev = want[i], true
	}
	if got := h.Chain(nil, ns, forged, bt); !slices.Equal(got, want) {
		t.Fatal("the forged chain does not collide")
	}
	return forged
}

// TestForgedCollisionNeverServed: a prompt whose chained xxh64 hashes
// collide with a victim's (forged by inverting xxh64) is never served the
// victim's KV — from pinned memory, nor from disk after a restart — because
// every tier verifies the SHA-256 prefix digest. The mismatch is counted.
func TestForgedCollisionNeverServed(t *testing.T) {
	ctx := context.Background()
	// Pinned memory: the victim's blocks written through and evicted from the GPU.
	{
		m := newManager(t, Config{GPUBlocks: 8, BlockTokens: bt, PinnedBytes: 1 << 20, Ingestion: IngestAll})
		victim := toks(4242, 3*bt)
		forged := forgeChain(t, m, victim)
		r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: victim})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, r)
		writeBlocks(t, m, r.Blocks, victim, "")
		if err := commitFree(ctx, m, 1); err != nil {
			t.Fatal(err)
		}
		evictAll(t, m, 8)
		r, err = m.Allocate(ctx, AllocRequest{Seq: 2, Tokens: forged})
		if err != nil {
			t.Fatal(err)
		}
		out := wait(t, r)
		if r.Tokens.Of(Pinned) == 0 {
			t.Fatalf("the forged prompt's lookup found nothing in pinned memory (%+v): the test does not reach verification", r)
		}
		if out.ValidTokens != 0 || out.Mismatch == 0 {
			t.Fatalf("pinned: the forged prompt's load %+v, want no valid token and the mismatch counted", out)
		}
		if st, _ := m.Stats(ctx); st.Tier(Pinned).Mismatches == 0 {
			t.Fatalf("pinned: mismatches not counted: %+v", st.Tier(Pinned))
		}
	}
	dir := t.TempDir()
	cfg := diskConfig(t, dir)
	cfg.Ingestion, cfg.DiskIngestion = IngestAll, IngestAll
	m := newManager(t, cfg)
	victim := toks(4242, 3*bt)
	forged := forgeChain(t, m, victim)
	pushDown(t, m, victim) // computed, committed, written through, evicted from the GPU
	check := func(where string, m *Manager) {
		t.Helper()
		if p, err := m.Exists(ctx, forged, ""); err != nil || p != (Presence{}) {
			t.Fatalf("%s: the forged prompt sees %+v (%v)", where, p, err)
		}
		r, err := m.Allocate(ctx, AllocRequest{Seq: 500, Tokens: forged})
		if err != nil {
			t.Fatal(err)
		}
		out := wait(t, r)
		t.Logf("%s: alloc %v, outcome %+v", where, r.Tokens, out)
		if out.ValidTokens != 0 {
			t.Fatalf("%s: the forged prompt was served %d tokens (%+v, alloc %+v)", where, out.ValidTokens, out, r)
		}
		if err := m.Free(ctx, 500); err != nil {
			t.Fatal(err)
		}
		st, err := m.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Tokens.Below() > 0 && st.Tier(GPU).Mismatches+st.Tier(Pinned).Mismatches+st.Tier(Disk).Mismatches+st.Tier(Disk).Failed == 0 {
			t.Fatalf("%s: a load was attempted and failed verification, but nothing counted it: %+v", where, st)
		}
		// The victim still gets its own blocks.
		if p, _ := m.Exists(ctx, victim, ""); p.Tokens.Of(Pinned)+p.Tokens.Of(Disk) == 0 {
			t.Fatalf("%s: the victim's chain is gone below the GPU: %+v", where, p)
		}
	}
	check("disk", m)
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m2 := newManager(t, cfg) // only the disk holds the victim now
	check("disk after a restart", m2)
}
