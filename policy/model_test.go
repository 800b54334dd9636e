package policy

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// refPolicy is a slow, obviously correct reference for one policy, built on
// slices. resident returns the keys in the order checkPolicy reports them.
type refPolicy interface {
	add(k Key)
	access(k Key)
	remove(k Key)
	evict(evictable func(Key) bool) (Key, bool)
	resident() []Key
}

// refQueue models LRU (moveOnHit) and FIFO: index 0 is evicted first.
type refQueue struct {
	keys      []Key
	moveOnHit bool
}

func (m *refQueue) add(k Key) {
	if slices.Contains(m.keys, k) {
		m.access(k)
		return
	}
	m.keys = append(m.keys, k)
}

func (m *refQueue) access(k Key) {
	if i := slices.Index(m.keys, k); i >= 0 && m.moveOnHit {
		m.keys = append(slices.Delete(m.keys, i, i+1), k)
	}
}

func (m *refQueue) remove(k Key) {
	if i := slices.Index(m.keys, k); i >= 0 {
		m.keys = slices.Delete(m.keys, i, i+1)
	}
}

func (m *refQueue) evict(evictable func(Key) bool) (Key, bool) {
	for i, k := range m.keys {
		if evictable == nil || evictable(k) {
			m.keys = slices.Delete(m.keys, i, i+1)
			return k, true
		}
	}
	return 0, false
}

func (m *refQueue) resident() []Key { return m.keys }

// refS3FIFO models S3-FIFO with three slices and a frequency map.
type refS3FIFO struct {
	small, main, ghost []Key
	freq               map[Key]int
	smallCap, ghostCap int
}

func newRefS3FIFO(capacity int) *refS3FIFO {
	c := DefaultS3FIFOConfig()
	return &refS3FIFO{freq: map[Key]int{}, smallCap: max(1, int(c.SmallRatio*float64(capacity))),
		ghostCap: max(1, int(c.GhostRatio*float64(capacity)))}
}

func (m *refS3FIFO) isResident(k Key) bool {
	return slices.Contains(m.small, k) || slices.Contains(m.main, k)
}

func (m *refS3FIFO) add(k Key) {
	switch {
	case m.isResident(k):
		m.access(k)
	case slices.Contains(m.ghost, k):
		m.ghost = slices.DeleteFunc(m.ghost, func(g Key) bool { return g == k })
		m.main = append(m.main, k)
		m.freq[k] = 0
	default:
		m.small = append(m.small, k)
		m.freq[k] = 0
	}
}

func (m *refS3FIFO) access(k Key) {
	if m.isResident(k) {
		m.freq[k] = min(m.freq[k]+1, 3)
	}
}

func (m *refS3FIFO) remove(k Key) {
	if m.isResident(k) {
		m.small = slices.DeleteFunc(m.small, func(x Key) bool { return x == k })
		m.main = slices.DeleteFunc(m.main, func(x Key) bool { return x == k })
		delete(m.freq, k)
	}
}

func (m *refS3FIFO) evict(ev func(Key) bool) (Key, bool) {
	ok := func(k Key) bool { return ev == nil || ev(k) }
	evictSmall := func() (Key, bool) {
		var keep []Key
		for i, k := range m.small {
			switch {
			case m.freq[k] > 0:
				m.freq[k] = 0
				m.main = append(m.main, k)
			case ok(k):
				m.small = append(keep, m.small[i+1:]...)
				delete(m.freq, k)
				m.ghost = append(m.ghost, k)
				if len(m.ghost) > m.ghostCap {
					m.ghost = m.ghost[1:]
				}
				return k, true
			default:
				keep = append(keep, k)
			}
		}
		m.small = keep
		return 0, false
	}
	evictMain := func() (Key, bool) {
		// Rotate until a full pass changes nothing.
		for changed := true; changed; {
			changed = false
			var next []Key
			for i := 0; i < len(m.main); i++ {
				k := m.main[i]
				switch {
				case m.freq[k] > 0:
					m.freq[k]--
					m.main = append(m.main, k) // revisit at the back
					changed = true
				case ok(k):
					m.main = append(next, m.main[i+1:]...)
					delete(m.freq, k)
					return k, true
				default:
					next = append(next, k)
				}
			}
			m.main = next
		}
		return 0, false
	}
	if len(m.small) > 0 && (len(m.small) >= m.smallCap || len(m.main) == 0) {
		if k, found := evictSmall(); found {
			return k, true
		}
		return evictMain()
	}
	if k, found := evictMain(); found {
		return k, true
	}
	before := len(m.main)
	if k, found := evictSmall(); found {
		return k, true
	}
	if len(m.main) == before {
		return 0, false
	}
	return evictMain()
}

func (m *refS3FIFO) resident() []Key { return append(slices.Clone(m.small), m.main...) }

// modelOp applies one random operation to p and to its reference alike
// (add, access, remove, or an eviction through a random filter or none) and
// checks an eviction's victim against the reference's.
func modelOp(t *testing.T, rng *rand.Rand, p Policy, ref refPolicy, keySpace int, seed uint64, step int) {
	t.Helper()
	k := Key(rng.IntN(keySpace))
	switch op := rng.IntN(10); {
	case op < 4:
		p.Add(k)
		ref.add(k)
	case op < 6:
		p.Access(k)
		ref.access(k)
	case op < 7:
		p.Remove(k)
		ref.remove(k)
	default:
		var ev func(Key) bool
		if rng.IntN(3) > 0 {
			mask := rng.Uint64()
			ev = func(k Key) bool { return mask>>(k%64)&1 == 1 }
		}
		got, gotOK := p.Evict(ev)
		want, wantOK := ref.evict(ev)
		if got != want || gotOK != wantOK {
			t.Fatalf("seed %d step %d: Evict = %d, %v; reference %d, %v", seed, step, got, gotOK, want, wantOK)
		}
		if gotOK && p.Contains(got) {
			t.Fatalf("seed %d step %d: victim %d still resident", seed, step, got)
		}
	}
}

func newRef(kind Kind, capacity int) refPolicy {
	switch kind {
	case LRU:
		return &refQueue{moveOnHit: true}
	case FIFO:
		return &refQueue{}
	default:
		return newRefS3FIFO(capacity)
	}
}

// TestModel drives each policy and its reference with the same random
// operations and compares victims, Len, Contains and queue order after every
// step.
func TestModel(t *testing.T) {
	const keySpace, steps = 48, 3000
	for _, kind := range []Kind{LRU, FIFO, S3FIFO} {
		for seed := range uint64(8) {
			t.Run(kind.String(), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 0x6b76))
				capacity := 1 + rng.IntN(40)
				p := mustNew(t, kind, capacity)
				ref := newRef(kind, capacity)
				for step := range steps {
					modelOp(t, rng, p, ref, keySpace, seed, step)
					order := checkPolicy(t, p)
					if want := ref.resident(); !slices.Equal(order, want) {
						t.Fatalf("seed %d step %d: order %v, reference %v", seed, step, order, want)
					}
					if p.Len() != len(order) {
						t.Fatalf("seed %d step %d: Len %d, want %d", seed, step, p.Len(), len(order))
					}
					for k := range Key(keySpace) {
						if p.Contains(k) != slices.Contains(order, k) {
							t.Fatalf("seed %d step %d: Contains(%d) = %v", seed, step, k, p.Contains(k))
						}
					}
				}
			})
		}
	}
}
