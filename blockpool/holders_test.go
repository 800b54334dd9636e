package blockpool

import (
	"fmt"
	"math/rand/v2"
	"slices"
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

// TestForgedHashesDoNotBuildOneProbeRun: a tenant of its own namespace
// ("evil", VocabSize unset, as by default) commits K one-block prompts forged
// (internal/xxforge, constant time each) to hold the 64-bit hash of a
// victim's first block. At most maxHolders blocks hold one hash, so a
// lookup of the victim's hash, and of anyone else's, walks a run that does
// not grow with K. (When several blocks per hash came in, every forged block
// got an entry in one probe run of K slots that every lookup of the hash and
// many others walked: review of 2026-11-27.)
func TestForgedHashesDoNotBuildOneProbeRun(t *testing.T) {
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

// BenchmarkRecacheChain: a load publishes its chain's blocks in order
// (gpu/tier publishFetch: Recache of each); with Config.Journal each needs its
// chain's namespace, found from the block before (chainNS's memo), not by a
// walk to the chain's start (which made a load of n blocks O(n^2), review of
// 2026-11-27). ns/op is per block: it does not grow with the chain.
func BenchmarkRecacheChain(b *testing.B) {
	for _, n := range []int{500, 4000} {
		b.Run(fmt.Sprintf("blocks=%d", n), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				p, err := New(Config{NumBlocks: n + 1, BlockSize: 1, Journal: true})
				if err != nil {
					b.Fatal(err)
				}
				a, err := p.Allocate(1, seq(n, 7), "tenant")
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				for _, id := range a.Blocks {
					p.Recache(id)
				}
				b.StopTimer()
				if j := p.DrainJournal(); len(j) != n || j[n-1].NS != "tenant" {
					b.Fatalf("journal of %d entries", len(j))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/block")
		})
	}
}

// TestJournalMatchesTable: random owner calls
// (allocate with shared stems, commit, append, free, uncache, recache,
// pin/detach) with Journal on; after each, replaying the drained journal
// (Stored adds a hash not yet announced, a removal drops one announced)
// gives exactly the set of hashes the table holds.
func TestJournalMatchesTable(t *testing.T) {
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

// TestRecacheOfEmptyBlockReturns: Recache "does nothing if the block holds
// no full block", and returns. It used to walk the block's chain first
// (review of 2026-11-27): a block never taken since New had the zero-value
// link parent 0, pgen 0, so block 0 linked to itself and the walk never
// ended. Here a free block that a copy pins (Pin of a free block, as an
// offload ahead of need does), then Recache.
func TestRecacheOfEmptyBlockReturns(t *testing.T) {
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

// TestCachedHashesOnce: a hash two blocks hold (here a chain's block and
// one forged to answer to its hash after another prefix) is listed once.
func TestCachedHashesOnce(t *testing.T) {
	p, _, _, _ := forgedHolder(t)
	got := p.CachedHashes(nil)
	if n := len(got); n != 3 || len(slices.Compact(slices.Sorted(slices.Values(got)))) != 3 {
		t.Fatalf("CachedHashes = %x, want 3 distinct hashes (4 cached blocks, two holding one hash)", got)
	}
}

// forgedHolder commits chains 1,2,3,4 and 5,6,7,8 in an 8-block pool of
// 2-token blocks and forges the second chain's second block to answer to
// the first chain's second hash h: two cached blocks, own and forged,
// hold h.
func forgedHolder(t *testing.T) (p *Pool, h prefixhash.Hash, own, forged BlockID) {
	t.Helper()
	p = newPool(t, 8, 2)
	a, err := allocCommit(p, 1, []int64{1, 2, 3, 4}, "")
	if err != nil {
		t.Fatal(err)
	}
	x, err := allocCommit(p, 2, []int64{5, 6, 7, 8}, "")
	if err != nil {
		t.Fatal(err)
	}
	own, forged = a.Blocks[1], x.Blocks[1]
	h = p.blocks[own].hash
	p.byHash.remove(p.blocks[forged].hash, forged)
	p.blocks[forged].hash = h
	p.byHash.add(h, forged)
	return p, h, own, forged
}
