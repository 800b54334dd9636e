package blockpool

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/internal/xxforge"
	"github.com/kvtier/kvtier/prefixhash"
)

// probeLen returns how many slots a lookup of h reads before it stops at an
// empty slot: the cost of every lookup of h that misses (hitAfter,
// equivalent, holds, journalGone's get) and the run a remove shifts.
func probeLen(p *Pool, h prefixhash.Hash) int {
	t := &p.byHash
	n := 0
	for i := t.first(h); t.slots[i] != 0; i = (i + 1) & t.mask {
		n++
	}
	return n
}

// TestProbeRvFForgedHashesDoNotBuildOneProbeRun: a tenant of its own
// namespace ("evil", VocabSize unset, as by default) commits K one-block
// prompts forged (internal/xxforge, constant time each) to hold the 64-bit
// hash of a victim's first block. Before e071b02 publish refused a second
// block of a hash that a lookup could reach, so the table held one entry per
// hash; now each forged block gets an entry, all with one tag, so one home:
// a single probe run of K slots. Every lookup of the victim's hash walks all
// K (a miss, or a hit stored after them), each eviction of one of them walks
// and shifts the run, and every other tenant whose hash's home lands in the
// run walks it too: the attack the hashTable doc says the keyed tag
// prevents ("crafted hashes cannot aim at one probe run, and lookups of
// every tenant walk it").
func TestProbeRvFForgedHashesDoNotBuildOneProbeRun(t *testing.T) {
	const bs, k = 16, 3000
	p := newPool(t, 4096, bs)
	victim := seq(bs, 5000)
	var h prefixhash.Hasher
	target := h.Chain(nil, "", victim, bs)[0]
	prev, hasPrev := prefixhash.Seed("evil")
	r := rand.New(rand.NewPCG(1, 2))
	for i := range k {
		att := make([]int64, bs)
		for j := range att {
			att[j] = r.Int64N(1 << 20)
		}
		forged, err := xxforge.ForgeBlock(prev, hasPrev, att, target)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := allocCommit(p, SeqID(i), forged, "evil"); err != nil {
			t.Fatal(err)
		}
		if err := p.Deallocate(SeqID(i)); err != nil {
			t.Fatal(err)
		}
	}
	check(t, p)
	// Timing, for the report only.
	vk := ComputeKeys("", victim, bs, false)
	other := seq(bs, 90000)
	ok := ComputeKeys("", other, bs, false)
	const reps = 2000
	start := time.Now()
	for range reps {
		_, _ = p.CachedBlocks(victim, vk)
	}
	tv := time.Since(start)
	start = time.Now()
	for range reps {
		_, _ = p.CachedBlocks(other, ok)
	}
	to := time.Since(start)
	t.Logf("lookup of the victim's prompt %v, of an unrelated prompt %v (per call)", tv/reps, to/reps)

	if n := probeLen(p, target); n > 64 {
		t.Errorf("a lookup of the victim's hash walks %d slots (%d blocks hold it, all forged by one tenant); want a bound independent of what a tenant commits", n, len(p.Holders(nil, target)))
	}
	// Other tenants: the mean walk of random unrelated hashes.
	sum := 0
	const m = 4000
	for i := range m {
		sum += probeLen(p, prefixhash.Hash(r.Uint64()^uint64(i)))
	}
	if mean := float64(sum) / m; mean > 8 {
		t.Errorf("unrelated lookups walk %.1f slots on average (table %d slots, %d entries): the forged run taxes every tenant", mean, len(p.byHash.slots), p.byHash.len())
	}
}

// TestProbeRvFRecacheChainIsLinear: a load of a chain of n blocks publishes
// them one by one (gpu/tier publishFetch: Recache of each loaded block, in
// order). With Config.Journal on (KV events), Recache calls chainNS, which
// walks from the block to its chain's first block: a load of n blocks costs
// O(n^2) steps (32M for a 128k-token prompt in 16-token blocks) on the GPU
// tier's actor. The time per block must not grow with the chain's length.
func TestProbeRvFRecacheChainIsLinear(t *testing.T) {
	per := func(n int) time.Duration {
		p, err := New(Config{NumBlocks: n + 1, BlockSize: 1, Journal: true})
		if err != nil {
			t.Fatal(err)
		}
		a, err := p.Allocate(1, seq(n, 7), "tenant")
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for _, id := range a.Blocks {
			p.Recache(id)
		}
		d := time.Since(start)
		if j := p.DrainJournal(); len(j) != n || j[n-1].NS != "tenant" {
			t.Fatalf("journal of %d entries", len(j))
		}
		return d / time.Duration(n)
	}
	best := func(n int) time.Duration {
		b := per(n)
		for range 2 {
			b = min(b, per(n))
		}
		return b
	}
	small, large := best(500), best(4000)
	t.Logf("Recache per block: %v for a chain of 500, %v for a chain of 4000", small, large)
	if large > 3*small {
		t.Errorf("Recache per block grows with the chain: %v at 500 blocks, %v at 4000 (chainNS walks to the chain's start each time)", small, large)
	}
}

// TestRvFJournalMatchesTable (passes; kept as a check): random owner calls
// (allocate with shared stems, commit, append, free, uncache, recache,
// pin/detach) with Journal on; after each, replaying the drained journal
// (Stored adds a hash not yet announced, a removal drops one announced)
// gives exactly the set of hashes the table holds.
func TestRvFJournalMatchesTable(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for range 150 {
		p, err := New(Config{NumBlocks: 12, BlockSize: 2, Journal: true, Digests: true})
		if err != nil {
			t.Fatal(err)
		}
		announced := map[prefixhash.Hash]bool{}
		pins := map[BlockID]int{}
		for step := range 300 {
			id := SeqID(r.IntN(5))
			switch r.IntN(9) {
			case 0, 1:
				stem := r.IntN(4) * 2
				toks := make([]int64, stem+1+r.IntN(4))
				for i := range toks {
					if i < stem {
						toks[i] = int64(i % 3)
					} else {
						toks[i] = int64(r.IntN(3))
					}
				}
				_, _ = p.AllocateRequest(Request{Seq: id, Tokens: toks, NS: []string{"", "a"}[r.IntN(2)], MaxHits: r.IntN(3) - 1})
			case 2:
				_, _ = p.Commit(id, AllTokens, nil)
			case 3:
				_, _ = p.AppendTokens(id, []int64{int64(r.IntN(3))}, r.IntN(2), nil)
			case 4:
				_ = p.Deallocate(id)
			case 5:
				p.Uncache(BlockID(r.IntN(12)))
			case 6:
				b := BlockID(r.IntN(12))
				// Only a block holding a full block: see TestProbeRvFRecacheOfEmptyBlockReturns.
				if p.blocks[b].state != stateFree && p.blocks[b].state != stateReserved && len(p.blocks[b].tokens) == 2 {
					p.Recache(b)
				}
			case 7:
				b := BlockID(r.IntN(12))
				if p.blocks[b].state == stateReserved {
					break
				}
				if pins[b] > 0 && r.IntN(2) == 0 {
					p.Unpin(b)
					pins[b]--
				} else {
					p.Pin(b)
					pins[b]++
				}
			case 8:
				tbl, err := p.Table(nil, id)
				if err != nil || len(tbl) == 0 {
					break
				}
				i := r.IntN(len(tbl))
				if pins[tbl[i]] > 0 {
					_, _ = p.Detach(id, i)
				}
			}
			if err := p.CheckInvariants(); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			for _, c := range p.DrainJournal() {
				if c.Stored {
					if announced[c.Hash] {
						t.Fatalf("step %d: %x stored twice", step, c.Hash)
					}
					announced[c.Hash] = true
				} else {
					if !announced[c.Hash] {
						t.Fatalf("step %d: %x removed, never stored", step, c.Hash)
					}
					delete(announced, c.Hash)
				}
			}
			held := map[prefixhash.Hash]bool{}
			for _, h := range p.CachedHashes(nil) {
				held[h] = true
			}
			if len(held) != len(announced) {
				t.Fatalf("step %d: table holds %d hashes, journal announced %d", step, len(held), len(announced))
			}
			for h := range held {
				if !announced[h] {
					t.Fatalf("step %d: %x held, not announced", step, h)
				}
			}
		}
	}
}

// TestProbeRvFRecacheOfEmptyBlockReturns: Recache "does nothing if the
// block holds no full block", but with Config.Journal it first walks the
// block's chain (chainNS, c87c8f9) and only then lets publish check the
// tokens. A block never taken since New has the zero-value link parent 0,
// pgen 0, which matches block 0's generation 0 while block 0 has never
// been reused, and block 0 links to itself: the walk never ends. Here a
// free block that a copy pins (Pin of a free block, as an offload ahead of
// need does) and then Recache: the call hangs.
func TestProbeRvFRecacheOfEmptyBlockReturns(t *testing.T) {
	p, err := New(Config{NumBlocks: 4, BlockSize: 2, Journal: true})
	if err != nil {
		t.Fatal(err)
	}
	p.Pin(2)
	done := make(chan struct{})
	var once sync.Once
	go func() {
		p.Recache(2) // holds no full block: must do nothing
		once.Do(func() { close(done) })
	}()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("Recache of a block holding no full block did not return in 3s (chainNS loops on block 0's zero-value self link)")
	}
}
