package stress

import (
	"context"
	"testing"

	"github.com/kvtier/kvtier"
)

// TestDisplacedVictimSwappedDownAgain (review probe of b47399e and
// 0551283): the victim commits first and is written through to pinned
// memory and the disk; a forged squatter of the same hashes commits after
// it and, the newer write, displaces it in pinned memory and then on the
// disk. The hashes never leave every tier below, so the GPU hears no
// BelowGone and still flags the victim's blocks as held below (flagBelow).
// The victim is used again (a GPU hit) and swapped out: Swap writes down
// "committed blocks that have no copy below the GPU yet", which the
// victim's are, but they were skipped as below, and the victim's prompt
// was held nowhere below (its later load: a counted mismatch).
func TestDisplacedVictimSwappedDownAgain(t *testing.T) {
	deadline(t)
	ctx, cancel := context.WithTimeout(context.Background(), hangAfter)
	defer cancel()
	cfg := kvtier.Config{Ingestion: kvtier.IngestAll, DiskIngestion: kvtier.IngestAll, DiskDir: t.TempDir(), DiskBytes: 4096 * (8 << 10)}
	m := newManager(t, cfg)
	defer closeManager(t, m)
	k := newWorker(m, &writers{}, 0, tenants, 1)
	f := forge(t, ctx, m, cfg, k)
	run := func(tokens []int64, swap bool) {
		t.Helper()
		k.next++
		if err := k.allocate(ctx, k.next, tokens, false /* wantMiss */); err != nil {
			t.Fatal(err)
		}
		if swap {
			seq := k.live[0].seq
			k.live = k.live[1:]
			errs, err := m.Swap(ctx, []uint64{seq})
			if err != nil || errs[0] != nil {
				t.Fatalf("swap: %v %v", err, errs)
			}
		} else if err := k.free(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if err := m.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	victim := stem(1)
	held := func() kvtier.TierTokens {
		t.Helper()
		pr, err := m.Exists(ctx, victim, salt(0))
		if err != nil {
			t.Fatal(err)
		}
		return pr.Tokens
	}
	run(victim, false /* swap */)
	if h := held(); h.Of(kvtier.Pinned) != len(victim) {
		t.Fatalf("the victim written through is held %v", h)
	}
	run(f.own[0][1], false /* swap */) // the squatter displaces the victim below
	if h := held(); h.Of(kvtier.Pinned)+h.Of(kvtier.Disk) != 0 {
		t.Fatalf("after the squatter the victim is held %v below", h)
	}
	run(victim, true /* swap */) // a GPU hit, then swapped down
	if h := held(); h.Of(kvtier.Pinned) != len(victim) {
		st, _ := m.Stats(ctx)
		t.Fatalf("the victim swapped out after a squatter displaced it below is held %v, want pinned %d: the GPU skipped its blocks as held below; %v; %v; %v",
			h, len(victim), st.Tier(kvtier.GPU), st.Tier(kvtier.Pinned), st.Tier(kvtier.Disk))
	}
}
