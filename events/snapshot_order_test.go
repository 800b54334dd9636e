package events

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/kvtier/kvtier/messages"
)

// treeChecker applies BlockStored events as a router that builds a radix
// tree from parent links does (Dynamo's KV indexer): a block whose parent
// the medium holds (held, what the publisher says) must come after it.
type treeChecker struct {
	held  map[Medium][]uint64
	known map[Medium]map[uint64]bool
}

func (c *treeChecker) apply(b *Batch) error {
	c.known = map[Medium]map[uint64]bool{}
	for _, e := range b.Events {
		if e.Kind != BlockStored {
			continue
		}
		k := c.known[e.Medium]
		if k == nil {
			k = map[uint64]bool{}
			c.known[e.Medium] = k
		}
		parent, has := e.Parent, e.HasParent
		for _, h := range e.Hashes {
			if has && !k[parent] && c.holds(e.Medium, parent) {
				return fmt.Errorf("%s block %d before its parent %d", e.Medium, h, parent)
			}
			if k[h] {
				return fmt.Errorf("%s block %d stored twice", e.Medium, h)
			}
			k[h] = true
			parent, has = h, true
		}
	}
	return nil
}

func (c *treeChecker) holds(m Medium, h uint64) bool {
	for _, x := range c.held[m] {
		if x == h {
			return true
		}
	}
	return false
}

// TestSnapshotParentsFirst: a snapshot lists each medium's blocks parents
// first, whatever order their hashes sort in, a chain's run of blocks in
// one BlockStored, a branch in its own; a checker that refuses a block
// before its parent takes it, and a View reset from it holds the
// publisher's residency. The snapshot listed blocks in hash order, one
// BlockStored each: every child whose hash sorts below its parent's came
// first.
func TestSnapshotParentsFirst(t *testing.T) {
	now := time.Unix(100, 0)
	p := NewPublisher(Config{BlockSize: 1})
	// GPU: 50 -> 40 -> 30, a branch 40 -> 35, and 45 -> 10.
	p.Apply(&messages.Residency{Tier: messages.GPU, Changes: []messages.ResidencyChange{
		change(true, 50, 0, false, 5), change(true, 40, 50, true, 4), change(true, 30, 40, true, 3), change(true, 35, 40, true, 6),
		change(true, 45, 0, false, 7), change(true, 10, 45, true, 1),
	}}, now)
	// CPU: 30 (its parent only on the GPU) -> 20 -> 15; 40 came down later.
	p.Apply(&messages.Residency{Tier: messages.GPU, Changes: []messages.ResidencyChange{change(true, 20, 30, true, 2), change(true, 15, 20, true, 8)}}, now)
	p.Apply(&messages.Residency{Tier: messages.Pinned, Changes: []messages.ResidencyChange{
		change(true, 15, 0, false), change(true, 20, 0, false), change(true, 30, 0, false), change(true, 40, 0, false),
	}}, now)
	snap := p.Snapshot(now)
	b, err := DecodeBatch(snap.Payload)
	if err != nil {
		t.Fatal(err)
	}
	c := &treeChecker{held: p.Residency()}
	if err := c.apply(&b); err != nil {
		t.Fatal(err)
	}
	stored := func(m Medium, parent uint64, hasParent bool, hs []uint64, toks ...int64) Event {
		return Event{Kind: BlockStored, Hashes: hs, Parent: parent, HasParent: hasParent, Tokens: toks, BlockSize: 1, Medium: m}
	}
	want := []Event{
		{Kind: AllBlocksCleared},
		stored(MediumGPU, 0, false, []uint64{45, 10}, 7, 1),
		stored(MediumGPU, 0, false, []uint64{50, 40, 30, 20, 15}, 5, 4, 3, 2, 8),
		stored(MediumGPU, 40, true, []uint64{35}, 6),
		stored(MediumCPU, 50, true, []uint64{40, 30, 20, 15}, 4, 3, 2, 8),
	}
	if !reflect.DeepEqual(b.Events, want) {
		t.Fatalf("snapshot\n%+v\nwant\n%+v", b.Events, want)
	}
	v := NewView()
	if err := v.Reset(snap.Seq, snap.Payload); err != nil {
		t.Fatal(err)
	}
	if got := v.Residency(); !reflect.DeepEqual(got, p.Residency()) {
		t.Fatalf("view %v, publisher %v", got, p.Residency())
	}
}

// TestSnapshotParentsFirstRandom: random forests on two mediums, hashes
// drawn at random, some blocks' parents held on the other medium only, some
// without tokens (a disk record without its chain), and a cycle of parent
// links (a hash collision): the snapshot lists every block once, each after
// its parent where the medium holds it (but on the cycle), the same bytes
// twice, and a View reset from it holds the publisher's residency.
func TestSnapshotParentsFirstRandom(t *testing.T) {
	now := time.Unix(100, 0)
	for seed := range uint64(50) {
		r := rand.New(rand.NewPCG(seed, 1))
		p := NewPublisher(Config{BlockSize: 1})
		var gpu, cpu []messages.ResidencyChange
		var hs []uint64
		for i := range 200 {
			h := r.Uint64()
			c := change(true, h, 0, false, int64(i))
			if len(hs) > 0 && r.IntN(5) > 0 {
				c.Parent, c.HasParent = hs[r.IntN(len(hs))], true
			}
			if r.IntN(10) == 0 {
				c.Tokens = nil
			}
			hs = append(hs, h)
			gpu = append(gpu, c)
			if r.IntN(2) == 0 {
				cpu = append(cpu, change(true, h, 0, false))
			}
		}
		p.Apply(&messages.Residency{Tier: messages.GPU, Changes: gpu}, now)
		p.Apply(&messages.Residency{Tier: messages.Pinned, Changes: cpu}, now)
		// A cycle on the GPU: 1 -> 2 -> 3 -> 1, and 4 under 2.
		p.Apply(&messages.Residency{Tier: messages.GPU, Changes: []messages.ResidencyChange{
			change(true, 1, 3, true, 1), change(true, 2, 1, true, 2), change(true, 3, 2, true, 3), change(true, 4, 2, true, 4),
		}}, now)
		held := p.Residency()
		// The checker excuses the cycle's first block, listed before its
		// parent 3, by not knowing 3 is held.
		ch := &treeChecker{held: map[Medium][]uint64{MediumCPU: held[MediumCPU]}}
		for _, h := range held[MediumGPU] {
			if h != 3 {
				ch.held[MediumGPU] = append(ch.held[MediumGPU], h)
			}
		}
		snap := p.Snapshot(now)
		b, err := DecodeBatch(snap.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.apply(&b); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if again := p.Snapshot(now); !reflect.DeepEqual(again.Payload, snap.Payload) {
			t.Fatalf("seed %d: two snapshots differ", seed)
		}
		v := NewView()
		if err := v.Reset(snap.Seq, snap.Payload); err != nil {
			t.Fatal(err)
		}
		if got := v.Residency(); !reflect.DeepEqual(got, held) {
			t.Fatalf("seed %d: view %v, publisher %v", seed, got, held)
		}
	}
}
