package blockpool

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvtier/kvtier/prefixhash"
)

// TestHashTableAgainstMap drives the table and a Go map with the same random adds
// and removes. It keeps the table near its most crowded (up to 380 entries in
// 1024 slots), so probe runs form and removals shift entries back, across the end of
// the table too; keys share their low 32 bits eight ways (which no longer puts
// them in one run: see TestHashTableSpreadsForgedHashes), and one hash may be
// held by several blocks, each with its entry: a walk (first, next) finds
// exactly the blocks holding it.
func TestHashTableAgainstMap(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	blocks := make([]block, 600)
	var free []BlockID
	for i := range blocks {
		free = append(free, BlockID(i))
	}
	var tb hashTable
	tb.init(blocks)
	ref := map[prefixhash.Hash][]BlockID{}
	var held []BlockID // every block with an entry
	walk := func(h prefixhash.Hash) []BlockID {
		var out []BlockID
		for i := tb.first(h); ; {
			id, n, ok := tb.next(h, i)
			if !ok {
				return out
			}
			out = append(out, id)
			i = n
		}
	}
	for step := range 20000 {
		if len(held) > 0 && (r.IntN(3) == 0 || len(held) >= 380) {
			i := r.IntN(len(held))
			id := held[i]
			held[i] = held[len(held)-1]
			held = held[:len(held)-1]
			h := blocks[id].hash
			tb.remove(h, id)
			free = append(free, id)
			ref[h] = slices.DeleteFunc(ref[h], func(x BlockID) bool { return x == id })
			if len(ref[h]) == 0 {
				delete(ref, h)
			}
		} else {
			h := prefixhash.Hash(r.Uint64N(8)<<32 | r.Uint64N(500))
			id := free[len(free)-1]
			free = free[:len(free)-1]
			blocks[id].hash = h
			tb.add(h, id)
			ref[h] = append(ref[h], id)
			held = append(held, id)
		}
		if tb.len() != len(held) {
			t.Fatalf("step %d: %d entries, %d blocks held", step, tb.len(), len(held))
		}
		if step%97 == 0 {
			for h, ids := range ref {
				got := walk(h)
				if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(ids))) {
					t.Fatalf("step %d: walk of %x = %v, want %v", step, h, got, ids)
				}
				if id, ok := tb.get(h); !ok || !slices.Contains(ids, id) {
					t.Fatalf("step %d: get %x = %d %v, want one of %v", step, h, id, ok, ids)
				}
				for _, id := range ids {
					if !tb.holds(h, id) {
						t.Fatalf("step %d: holds(%x, %d) false", step, h, id)
					}
				}
			}
			for range 20 {
				h := prefixhash.Hash(r.Uint64N(8)<<32 | (500 + r.Uint64N(500)))
				if _, ok := tb.get(h); ok {
					t.Fatalf("step %d: found absent %x", step, h)
				}
			}
		}
	}
}

// TestHashTableSpreadsForgedHashes: hashes forged to share their low 32
// bits (as internal/xxforge can make them) land in unrelated slots, not in
// one probe run that every lookup near it walks (they did while the tag was
// the hash's low half: 2,000 such hashes made one run of 2,000); and hashes
// whose tags do collide (found by a birthday search under the table's seed)
// are told apart by the full hash.
func TestHashTableSpreadsForgedHashes(t *testing.T) {
	const n = 2000
	blocks := make([]block, n)
	var tb hashTable
	tb.init(blocks)
	for i := range n {
		blocks[i].hash = prefixhash.Hash(uint64(i+1)<<32 | 0xdeadbeef)
		tb.add(blocks[i].hash, BlockID(i))
	}
	longest, run := 0, 0
	for _, s := range tb.slots {
		if _, used := slotBlock(s); used {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	if longest > 64 {
		t.Fatalf("the longest probe run holds %d of %d hashes sharing their low 32 bits", longest, n)
	}

	// Two hashes with one tag: both found, each removed alone.
	seen := map[uint32]prefixhash.Hash{}
	var a, b prefixhash.Hash
	for i := uint64(1); ; i++ {
		h := prefixhash.Hash(i * 0x9E3779B97F4A7C15)
		if g, ok := seen[tb.tag(h)]; ok {
			a, b = g, h
			break
		}
		seen[tb.tag(h)] = h
	}
	var tc hashTable
	small := make([]block, 2)
	tc.init(small)
	tc.seed = tb.seed
	small[0].hash, small[1].hash = a, b
	tc.add(a, 0)
	tc.add(b, 1)
	if id, ok := tc.get(b); !ok || id != 1 {
		t.Fatalf("get of the second hash with a shared tag: %d %v", id, ok)
	}
	tc.remove(a, 0)
	if _, ok := tc.get(a); ok {
		t.Fatal("a removed hash is still found")
	}
	if id, ok := tc.get(b); !ok || id != 1 {
		t.Fatalf("after removing its tag twin: %d %v", id, ok)
	}
}

// TestCheckInvariantsSeesHashTableDamage corrupts the hash table in each way a bug
// could and expects CheckInvariants to report it.
func TestCheckInvariantsSeesHashTableDamage(t *testing.T) {
	setup := func(t *testing.T) (*Pool, int) {
		p := newPool(t, 16, 2)
		if _, err := allocCommit(p, 1, seq(12, 100), ""); err != nil {
			t.Fatal(err)
		}
		check(t, p)
		for i, s := range p.byHash.slots {
			if s != 0 {
				return p, i
			}
		}
		t.Fatal("empty hash table")
		return nil, 0
	}
	for _, c := range []struct {
		name    string
		corrupt func(p *Pool, i int)
	}{
		{"entry cleared", func(p *Pool, i int) { p.byHash.slots[i] = 0; p.byHash.n-- }},
		{"entry names another block", func(p *Pool, i int) {
			id, _ := slotBlock(p.byHash.slots[i])
			p.byHash.slots[i] = packSlot(slotTag(p.byHash.slots[i]), (id+1)%BlockID(len(p.blocks)))
		}},
		{"entry names no block", func(p *Pool, i int) {
			p.byHash.slots[i] = packSlot(slotTag(p.byHash.slots[i]), BlockID(len(p.blocks)))
		}},
		{"tag changed", func(p *Pool, i int) { p.byHash.slots[i] += 1 << 32 }},
		{"count off", func(p *Pool, i int) { p.byHash.n++ }},
		{"duplicate entry", func(p *Pool, i int) {
			s := p.byHash.slots[i]
			for j := (uint64(i) + 1) & p.byHash.mask; ; j = (j + 1) & p.byHash.mask {
				if p.byHash.slots[j] == 0 {
					p.byHash.slots[j] = s
					p.byHash.n++
					return
				}
			}
		}},
		{"entry cut off from its home", func(p *Pool, i int) {
			// Uncache the entry's block, then put the entry back one empty slot
			// past the end of its probe run.
			s := p.byHash.slots[i]
			id, _ := slotBlock(s)
			p.Uncache(id)
			j := p.byHash.home(slotTag(s))
			for p.byHash.slots[j] != 0 {
				j = (j + 1) & p.byHash.mask
			}
			for k := (j + 1) & p.byHash.mask; ; k = (k + 1) & p.byHash.mask {
				if p.byHash.slots[k] == 0 {
					p.byHash.slots[k] = s
					p.byHash.n++
					p.blocks[id].cached = true
					return
				}
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, i := setup(t)
			c.corrupt(p, i)
			if err := p.CheckInvariants(); err == nil {
				t.Fatal("CheckInvariants found nothing")
			} else {
				t.Log(err)
			}
		})
	}
}

// TestCheckInvariantsSeesMisplacedTokens points a block's tokens outside its place
// in the slab and expects CheckInvariants to report it.
func TestCheckInvariantsSeesMisplacedTokens(t *testing.T) {
	p := newPool(t, 8, 2)
	a, err := allocCommit(p, 1, seq(4, 1), "")
	if err != nil {
		t.Fatal(err)
	}
	check(t, p)
	b := &p.blocks[a.Blocks[0]]
	b.tokens = append([]int64(nil), b.tokens...)
	if err := p.CheckInvariants(); err == nil {
		t.Fatal("CheckInvariants found nothing")
	}
}
