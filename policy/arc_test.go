package policy

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestARCOneUseKeysLeaveFirst: keys 1 and 2 are hit again and move to T2; a
// stream of one-use keys then churns through T1 and never evicts them, where
// LRU loses both.
func TestARCOneUseKeysLeaveFirst(t *testing.T) {
	const capacity = 4
	for _, tt := range []struct {
		kind     Kind
		survives bool
	}{{ARC, true}, {LRU, false}} {
		p := mustNew(t, tt.kind, capacity)
		p.Add(1)
		p.Add(2)
		p.Access(1)
		p.Access(2)
		for k := Key(100); k < 120; k++ {
			p.Add(k)
			for p.Len() > capacity {
				if _, ok := p.Evict(nil); !ok {
					t.Fatalf("%v: Evict failed at Len %d", tt.kind, p.Len())
				}
			}
			checkPolicy(t, p)
		}
		if got := p.Contains(1) && p.Contains(2); got != tt.survives {
			t.Errorf("%v: reused keys resident = %v, want %v", tt.kind, got, tt.survives)
		}
	}
}

// TestARCGhostHitsMoveTarget: a key evicted from T1 and added again comes back
// into T2 and raises the target; one evicted from T2 and added again lowers it.
func TestARCGhostHitsMoveTarget(t *testing.T) {
	p := newARC(2)
	p.Add(1)
	p.Add(2)
	p.Access(2) // T1 [1], T2 [2]
	if k, _ := p.Evict(nil); k != 1 {
		t.Fatalf("first victim %d, want 1 (T1 is over its target 0)", k)
	}
	p.Add(1) // B1 hit
	if p.target != 1 || p.nodes[p.index[1]].queue != onT2 {
		t.Fatalf("after B1 hit: target %d, key 1 on list %d; want 1 on T2", p.target, p.nodes[p.index[1]].queue)
	}
	// T1 is empty, so T2's LRU key (2) goes to B2.
	if k, _ := p.Evict(nil); k != 2 {
		t.Fatalf("second victim %d, want 2", k)
	}
	p.Add(2) // B2 hit
	if p.target != 0 || p.nodes[p.index[2]].queue != onT2 {
		t.Fatalf("after B2 hit: target %d, key 2 on list %d; want 0 on T2", p.target, p.nodes[p.index[2]].queue)
	}
	if got := checkPolicy(t, p); !slices.Equal(got, []Key{1, 2}) {
		t.Fatalf("resident %v, want [1 2]", got)
	}
}

// TestARCRemoveForgets: Remove drops a resident key without a ghost entry, so
// adding it again starts over in T1 and leaves the target alone.
func TestARCRemoveForgets(t *testing.T) {
	p := newARC(4)
	p.Add(7)
	p.Access(7)
	p.Remove(7)
	p.Remove(7) // no-op
	if p.Contains(7) || p.Len() != 0 || len(p.index) != 0 {
		t.Fatalf("after Remove: Contains %v Len %d index %d", p.Contains(7), p.Len(), len(p.index))
	}
	p.Add(7)
	if p.nodes[p.index[7]].queue != onT1 || p.target != 0 {
		t.Fatalf("re-added key on list %d, target %d; want T1, 0", p.nodes[p.index[7]].queue, p.target)
	}
	checkPolicy(t, p)
}

// TestARCSkipsPinnedKeys: keys rejected by the filter keep their place, and
// when T1 has nothing evictable the victim comes from T2.
func TestARCSkipsPinnedKeys(t *testing.T) {
	p := newARC(8)
	for k := range Key(4) {
		p.Add(k)
	}
	p.Access(3) // T1 [0 1 2], T2 [3]
	pinned := func(k Key) bool { return k >= 1 }
	if k, ok := p.Evict(pinned); !ok || k != 1 {
		t.Fatalf("Evict = %d, %v; want 1 (0 is pinned)", k, ok)
	}
	noT1 := func(k Key) bool { return k == 3 }
	if k, ok := p.Evict(noT1); !ok || k != 3 {
		t.Fatalf("Evict = %d, %v; want 3 from T2", k, ok)
	}
	if _, ok := p.Evict(func(Key) bool { return false }); ok {
		t.Fatal("Evict succeeded with every key pinned")
	}
	if got := checkPolicy(t, p); !slices.Equal(got, []Key{0, 2}) {
		t.Fatalf("resident %v, want [0 2]", got)
	}
	if got := drain(t, p, nil); !slices.Equal(got, []Key{0, 2}) {
		t.Fatalf("drain %v, want [0 2]", got)
	}
}

// TestARCGhostBound: the ghost lists never hold more than their bound, and
// the oldest ghost is forgotten first.
func TestARCGhostBound(t *testing.T) {
	const capacity = 3
	p := newARC(capacity)
	for k := range Key(100) {
		p.Add(k)
		for p.Len() > capacity {
			p.Evict(nil)
		}
		checkPolicy(t, p)
	}
	if p.b1.n != arcGhostFactor*capacity {
		t.Fatalf("B1 holds %d, want %d", p.b1.n, arcGhostFactor*capacity)
	}
	oldest := Key(100 - capacity - arcGhostFactor*capacity)
	if _, ok := p.index[oldest-1]; ok {
		t.Fatalf("ghost %d should be forgotten", oldest-1)
	}
	if i, ok := p.index[oldest]; !ok || p.nodes[i].queue != onB1 {
		t.Fatalf("ghost %d should be remembered in B1", oldest)
	}
}

// refARC models ARC with four slices (index 0 is the LRU end).
type refARC struct {
	t1, t2, b1, b2      []Key
	target, capacity, g int
}

func (m *refARC) isResident(k Key) bool { return slices.Contains(m.t1, k) || slices.Contains(m.t2, k) }

func del(s []Key, k Key) []Key { return slices.DeleteFunc(s, func(x Key) bool { return x == k }) }

func (m *refARC) add(k Key) {
	switch {
	case m.isResident(k):
		m.access(k)
	case slices.Contains(m.b1, k):
		m.target = min(m.capacity, m.target+max(1, len(m.b2)/len(m.b1)))
		m.b1 = del(m.b1, k)
		m.t2 = append(m.t2, k)
	case slices.Contains(m.b2, k):
		m.target = max(0, m.target-max(1, len(m.b1)/len(m.b2)))
		m.b2 = del(m.b2, k)
		m.t2 = append(m.t2, k)
	default:
		m.t1 = append(m.t1, k)
	}
}

func (m *refARC) access(k Key) {
	if m.isResident(k) {
		m.t1, m.t2 = del(m.t1, k), append(del(m.t2, k), k)
	}
}

func (m *refARC) remove(k Key) { m.t1, m.t2 = del(m.t1, k), del(m.t2, k) }

func (m *refARC) evict(ev func(Key) bool) (Key, bool) {
	take := func(list, ghost *[]Key) (Key, bool) {
		for _, k := range *list {
			if ev == nil || ev(k) {
				*list = del(*list, k)
				*ghost = append(*ghost, k)
				if len(*ghost) > m.g*m.capacity {
					*ghost = (*ghost)[1:]
				}
				return k, true
			}
		}
		return 0, false
	}
	if len(m.t1) > 0 && (len(m.t1) > m.target || len(m.t2) == 0) {
		if k, ok := take(&m.t1, &m.b1); ok {
			return k, true
		}
		return take(&m.t2, &m.b2)
	}
	if k, ok := take(&m.t2, &m.b2); ok {
		return k, true
	}
	return take(&m.t1, &m.b1)
}

func (m *refARC) resident() []Key { return append(slices.Clone(m.t1), m.t2...) }

// TestARCModel drives ARC and refARC with the same random operations and
// compares victims, the resident order, the ghost lists and the target after
// every step.
func TestARCModel(t *testing.T) {
	const keySpace, steps = 48, 3000
	for seed := range uint64(16) {
		rng := rand.New(rand.NewPCG(seed, 0xa7c))
		capacity := 1 + rng.IntN(20)
		p := newARC(capacity)
		ref := &refARC{capacity: capacity, g: arcGhostFactor}
		for step := range steps {
			modelOp(t, rng, p, ref, keySpace, seed, step)
			order := checkPolicy(t, p)
			if want := ref.resident(); !slices.Equal(order, want) {
				t.Fatalf("seed %d step %d: order %v, reference %v", seed, step, order, want)
			}
			b1, _ := checkQueue(&p.arena, &p.b1, onB1)
			b2, _ := checkQueue(&p.arena, &p.b2, onB2)
			if !slices.Equal(b1, ref.b1) || !slices.Equal(b2, ref.b2) || p.target != ref.target {
				t.Fatalf("seed %d step %d: B1 %v B2 %v target %d; reference %v %v %d",
					seed, step, b1, b2, p.target, ref.b1, ref.b2, ref.target)
			}
			for k := range Key(keySpace) {
				if p.Contains(k) != slices.Contains(order, k) {
					t.Fatalf("seed %d step %d: Contains(%d) = %v", seed, step, k, p.Contains(k))
				}
			}
		}
	}
}
