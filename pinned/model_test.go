package pinned

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/kvtier/kvtier/policy"
)

// modelSlot is the reference model's view of one slot.
type modelSlot struct {
	key   Key
	state State
	refs  int
}

// poolModel is a trivial reference: a slice of slots and a key map.
type poolModel struct {
	slots []modelSlot
	keys  map[Key]int // Filling and Resident keys
	hits  uint64
	miss  uint64
	evict uint64
}

func (m *poolModel) inState(s State) []int {
	var out []int
	for i, ms := range m.slots {
		if ms.state == s {
			out = append(out, i)
		}
	}
	return out
}

func (m *poolModel) withReaders() []int {
	var out []int
	for i, ms := range m.slots {
		if ms.refs > 0 {
			out = append(out, i)
		}
	}
	return out
}

// stamp writes k's pattern at both ends of a slot; checkStamp verifies it.
func stamp(b []byte, k Key) {
	b[0], b[len(b)-1] = byte(k), ^byte(k)
}

func checkStamp(t *testing.T, p *Pool, slot int, k Key, step int) {
	t.Helper()
	if b := p.Bytes(slot); b[0] != byte(k) || b[len(b)-1] != ^byte(k) {
		t.Fatalf("step %d: slot %d bytes %d..%d, want key %d's stamp", step, slot, b[0], b[len(b)-1], k)
	}
}

// TestModel drives the pool and a trivial model with the same random
// operations and compares them, and the pool's own invariants, after every
// step.
func TestModel(t *testing.T) {
	const keySpace, steps = 24, 2500
	for _, kind := range []policy.Kind{policy.LRU, policy.FIFO, policy.S3FIFO} {
		for seed := range uint64(4) {
			t.Run(kind.String(), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 0x706e))
				n := 1 + rng.IntN(12)
				p := newPool(t, n, 64+rng.IntN(2*pageSize), kind)
				m := &poolModel{slots: make([]modelSlot, n), keys: map[Key]int{}}
				for i := range m.slots {
					m.slots[i].state = StateFree
				}
				pick := func(s []int) (int, bool) {
					if len(s) == 0 {
						return 0, false
					}
					return s[rng.IntN(len(s))], true
				}
				for step := range steps {
					k := Key(rng.IntN(keySpace))
					switch op := rng.IntN(9); op {
					case 0, 1: // Reserve
						slot, err := p.Reserve(k)
						_, exists := m.keys[k]
						free := m.inState(StateFree)
						switch {
						case exists:
							if !errors.Is(err, ErrExists) {
								t.Fatalf("step %d: Reserve(%d) = %d, %v; want ErrExists", step, k, slot, err)
							}
						case len(free) == 0:
							if !errors.Is(err, ErrNoSpace) {
								t.Fatalf("step %d: Reserve(%d) = %d, %v; want ErrNoSpace", step, k, slot, err)
							}
						default:
							if err != nil || m.slots[slot].state != StateFree {
								t.Fatalf("step %d: Reserve(%d) = %d, %v; model free %v", step, k, slot, err, free)
							}
							m.slots[slot] = modelSlot{key: k, state: StateFilling}
							m.keys[k] = slot
							stamp(p.Bytes(slot), k)
						}
					case 2: // Commit or Abort
						if slot, ok := pick(m.inState(StateFilling)); ok {
							if rng.IntN(4) == 0 {
								p.Abort(slot)
								delete(m.keys, m.slots[slot].key)
								m.slots[slot] = modelSlot{state: StateFree}
							} else {
								p.Commit(slot)
								m.slots[slot].state = StateResident
							}
						}
					case 3, 4: // Acquire
						slot, ok := p.Acquire(k)
						ms, exists := m.keys[k]
						want := exists && m.slots[ms].state == StateResident
						if ok != want || (ok && slot != ms) {
							t.Fatalf("step %d: Acquire(%d) = %d, %v; model %d, %v", step, k, slot, ok, ms, want)
						}
						if ok {
							m.slots[slot].refs++
							m.hits++
							checkStamp(t, p, slot, k, step)
						} else {
							m.miss++
						}
					case 5: // Release
						if slot, ok := pick(m.withReaders()); ok {
							p.Release(slot)
							m.slots[slot].refs--
							if m.slots[slot].refs == 0 && m.slots[slot].state == StateDoomed {
								m.slots[slot] = modelSlot{state: StateFree}
							}
						}
					case 6: // Evict
						want := 0
						for _, ms := range m.slots {
							if ms.state == StateResident && ms.refs == 0 {
								want++
							}
						}
						n := rng.IntN(3)
						victims := p.Evict(n)
						if len(victims) != min(n, want) {
							t.Fatalf("step %d: Evict(%d) gave %d victims, %d evictable", step, n, len(victims), want)
						}
						for _, v := range victims {
							ms := m.slots[v.Slot]
							if ms.state != StateResident || ms.refs != 0 || ms.key != v.Key {
								t.Fatalf("step %d: victim %+v was %+v in the model", step, v, ms)
							}
							checkStamp(t, p, v.Slot, v.Key, step)
							m.slots[v.Slot].state = StateDraining
							delete(m.keys, v.Key)
							m.evict++
						}
					case 7: // Free
						if slot, ok := pick(m.inState(StateDraining)); ok {
							p.Free(slot)
							m.slots[slot] = modelSlot{state: StateFree}
						}
					case 8: // Remove
						ms, exists := m.keys[k]
						want := exists && m.slots[ms].state == StateResident
						if got := p.Remove(k); got != want {
							t.Fatalf("step %d: Remove(%d) = %v, model %v", step, k, got, want)
						}
						if want {
							delete(m.keys, k)
							if m.slots[ms].refs > 0 {
								m.slots[ms].state = StateDoomed
							} else {
								m.slots[ms] = modelSlot{state: StateFree}
							}
						}
					}
					compareModel(t, p, m, step, keySpace)
				}
			})
		}
	}
}

func compareModel(t *testing.T, p *Pool, m *poolModel, step, keySpace int) {
	t.Helper()
	if err := p.CheckInvariants(); err != nil {
		t.Fatalf("step %d: %v", step, err)
	}
	for i, ms := range m.slots {
		if got := p.State(i); got != ms.state {
			t.Fatalf("step %d: slot %d is %v, model %v", step, i, got, ms.state)
		}
	}
	st := p.Stats()
	readers := 0
	for _, ms := range m.slots {
		readers += ms.refs
	}
	got := [...]int{st.Free, st.Filling, st.Resident, st.Doomed, st.Draining, st.Readers}
	want := [...]int{len(m.inState(StateFree)), len(m.inState(StateFilling)), len(m.inState(StateResident)),
		len(m.inState(StateDoomed)), len(m.inState(StateDraining)), readers}
	if got != want {
		t.Fatalf("step %d: free/filling/resident/doomed/draining/readers %v, model %v", step, got, want)
	}
	if st.Hits != m.hits || st.Misses != m.miss || st.Evictions != m.evict {
		t.Fatalf("step %d: hits/misses/evictions %d/%d/%d, model %d/%d/%d",
			step, st.Hits, st.Misses, st.Evictions, m.hits, m.miss, m.evict)
	}
	for k := range Key(keySpace) {
		slot, ok := p.Lookup(k)
		ms, exists := m.keys[k]
		if want := exists && m.slots[ms].state == StateResident; ok != want || (ok && slot != ms) {
			t.Fatalf("step %d: Lookup(%d) = %d, %v; model %d, %v", step, k, slot, ok, ms, want)
		}
	}
}
