package policy

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkAdaptiveSlots adds to checkAdaptive what it does not look at: every
// heap slot an entry claims (in a lane, a shadow or a vote lane) holds that
// entry, so a stale slot left by a lane that slept or was rebuilt shows up;
// and a dormant shadow holds nothing, counts nothing, neither votes nor is
// the choice.
func checkAdaptiveSlots(t *testing.T, p *adaptive) {
	t.Helper()
	checkAdaptive(t, p)
	lanes := []*lane{&p.real}
	for s := range p.shadows {
		lanes = append(lanes, &p.shadows[s])
	}
	for k, i := range p.index {
		e := &p.entries[i]
		for _, l := range lanes {
			if j := e.pos[l.slot]; j >= 0 && (int(j) >= len(l.heap) || l.heap[j] != i) {
				t.Fatalf("key %d claims slot %d of lane %d, which holds %d keys", k, j, l.id, len(l.heap))
			}
		}
		if j := e.pos[voteSlot]; j >= 0 {
			if v := &p.votes[e.held]; int(j) >= len(v.heap) || v.heap[j] != i {
				t.Fatalf("key %d claims slot %d of vote lane %d, which holds %d keys", k, j, e.held, len(v.heap))
			}
		}
	}
	for s := range p.shadows {
		l := &p.shadows[s]
		if !l.dormant {
			continue
		}
		if len(l.heap) > 0 || l.hits != 0 || p.voting(l) || p.choice == s {
			t.Fatalf("dormant shadow %d: %d keys, %v hits, voting %v, chosen %v", l.id, len(l.heap), l.hits, p.voting(l), p.choice == s)
		}
	}
}

// streamKey returns, when reuse allows and a coin says so, one of the last
// four keys of the stream whose latest key is *last (once it is past
// floor+4), and otherwise a new key, which becomes *last.
func streamKey(rng *rand.Rand, last *Key, floor Key, reuse bool) Key {
	if reuse && rng.IntN(2) == 0 && *last > floor+4 {
		return *last - Key(rng.IntN(4))
	}
	*last++
	return *last
}

// TestAdaptiveClassesWithShadows drives the default Adaptive (every shadow,
// the vote, switches, the dormant class shadow, a small history so that
// sweeps happen) with request classes whose reuse changes by phase, so that
// a class is found low and not low again several times, and checks every
// heap and slot after every step. Now and then the shadows' hit counts are
// shuffled so that the choice moves among all the awake shadows, the class
// shadow included.
//
// Besides the default candidates it runs configurations a caller may give:
// a class candidate first (its twin later), two class candidates sharing
// one twin, and a class candidate with no twin.
func TestAdaptiveClassesWithShadows(t *testing.T) {
	inf := math.Inf(1)
	configs := [][]Candidate{
		DefaultAdaptiveConfig().Candidates,
		{{Rank: RankSecondUse, Window: 1, Class: true}, {Rank: RankFrequency, Window: 1}, {Rank: RankSecondUse, Window: 1}, {Rank: RankFrequencyNewFirst, Window: 0}},
		{{Rank: RankFrequency, Window: 1}, {Rank: RankSecondUse, Window: 4, Class: true}, {Rank: RankSecondUse, Window: 4},
			{Rank: RankFrequencyNewFirst, Window: 0, Class: true}, {Rank: RankSecondUse, Window: 4, Class: true}, {Rank: RankFrequencyNewFirst, Window: 0}},
		{{Rank: RankSecondUse, Window: 1}, {Rank: RankFrequency, Window: inf, Class: true}, {Rank: RankSecondUse, Window: inf}},
	}
	totalFlipsOnClass := 0
	for seed := uint64(1); seed <= 8; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		const capacity = 8
		cfg := DefaultAdaptiveConfig()
		cfg.Candidates = configs[seed%uint64(len(configs))]
		cfg.MinHistory = 64
		cfg.History = 4
		pp, err := NewAdaptive(capacity, cfg)
		if err != nil {
			t.Fatal(err)
		}
		p := pp.(*adaptive)
		p.switched = true
		res := map[Key]bool{}
		fresh := [3]Key{0, 1 << 20, 2 << 20}
		var flips, flipsOnClass, onClass, voted int
		var lastLow bool
		for step := range 30000 {
			rare := step/3000%2 == 0 // class 2's keys are seen once in these phases
			var k Key
			h := randomHint(rng)
			op := rng.IntN(20)
			switch {
			case op < 5: // class 1: new keys, often seen again
				h.Class = 1
				k = streamKey(rng, &fresh[1], 0, true)
				p.AddHint(k, h)
				res[k] = true
			case op < 10: // class 2: new keys, seen again only in some phases
				h.Class = 2
				k = streamKey(rng, &fresh[2], 2<<20, !rare)
				p.AddHint(k, h)
				res[k] = true
			default: // a small key space of mixed classes
				k = Key(rng.IntN(24))
				h.Class = uint8(rng.IntN(4))
				switch {
				case op < 13:
					p.AddHint(k, h)
					res[k] = true
				case op < 15:
					p.AccessHint(k, h)
				case op < 17:
					p.Miss(k)
				case op < 18:
					p.Remove(k)
					delete(res, k)
				default:
					mask := rng.Uint64()
					got, ok := p.Evict(func(k Key) bool { return mask>>(k%64)&1 == 1 })
					if ok && (!res[got] || mask>>(got%64)&1 == 0) {
						t.Fatalf("seed %d step %d: victim %d resident %v", seed, step, got, res[got])
					}
					if ok {
						delete(res, got)
					}
				}
			}
			for p.Len() > capacity {
				got, ok := p.Evict(nil)
				if !ok || !res[got] {
					t.Fatalf("seed %d step %d: Evict(nil) = %d, %v with %d resident", seed, step, got, ok, p.Len())
				}
				delete(res, got)
			}
			if p.Len() != len(res) || p.Contains(k) != res[k] {
				t.Fatalf("seed %d step %d: Len %d Contains(%d) %v; want %d, %v", seed, step, p.Len(), k, p.Contains(k), len(res), res[k])
			}
			checkAdaptiveSlots(t, p)
			if rng.IntN(200) == 0 { // move the choice at the next step
				for s := range p.shadows {
					if !p.shadows[s].dormant {
						p.shadows[s].hits = float64(rng.IntN(4)) * minEvidence
					}
				}
			}
			if p.low[2] != lastLow {
				flips++
				if p.real.class {
					flipsOnClass++
				}
				lastLow = p.low[2]
			}
			if p.real.class {
				onClass++
			}
			if p.voters != nil {
				voted++
			}
		}
		totalFlipsOnClass += flipsOnClass
		if flips < 4 || onClass == 0 || voted == 0 || p.forgets == 0 {
			t.Fatalf("seed %d: class 2 flipped %d times, %d steps on the class ranking, %d voted, %d sweeps: the test does not reach what it checks",
				seed, flips, onClass, voted, p.forgets)
		}
		t.Logf("seed %d: %d flips (%d on the class ranking), %d steps on the class ranking, %d voted, %d sweeps", seed, flips, flipsOnClass, onClass, voted, p.forgets)
	}
	if totalFlipsOnClass == 0 {
		t.Fatal("no class flipped while the real cache ranked by classes")
	}
}

// TestAdaptiveNoClassesAsEightCandidates checks that the ninth default
// candidate costs nothing in behaviour where no class is given: the default
// Adaptive and one built with the first eight default candidates evict the
// same keys in the same order under the same random operations (hints,
// misses, removals, filtered evictions, history sweeps).
func TestAdaptiveNoClassesAsEightCandidates(t *testing.T) {
	for _, class := range []uint8{0, 1} {
		for seed := uint64(1); seed <= 3; seed++ {
			rng := rand.New(rand.NewPCG(seed, uint64(class)))
			capacity := []int{8, 64, 300}[seed-1]
			full := DefaultAdaptiveConfig()
			full.MinHistory, full.History = 4*capacity, 4
			eight := full
			eight.Candidates = full.Candidates[:8]
			if c := full.Candidates[8]; !c.Class || eight.Candidates[7].Class {
				t.Fatalf("the default candidates changed: %+v", full.Candidates)
			}
			a, _ := NewAdaptive(capacity, full)
			b, _ := NewAdaptive(capacity, eight)
			pa, pb := a.(*adaptive), b.(*adaptive)
			keys := 6 * capacity
			for step := range 40000 {
				k := Key(rng.IntN(keys))
				if rng.IntN(3) == 0 {
					k = Key(keys + step) // seen once
				}
				h := randomHint(rng)
				h.Class = class
				switch op := rng.IntN(20); {
				case op < 10:
					a.AddHint(k, h)
					b.AddHint(k, h)
				case op < 15:
					a.AccessHint(k, h)
					b.AccessHint(k, h)
				case op < 17 && class == 0: // a miss's key has class 0
					pa.Miss(k)
					pb.Miss(k)
				case op < 18:
					a.Remove(k)
					b.Remove(k)
				default:
					mask := rng.Uint64()
					f := func(k Key) bool { return mask>>(k%64)&1 == 1 }
					ka, oka := a.Evict(f)
					kb, okb := b.Evict(f)
					if ka != kb || oka != okb {
						t.Fatalf("class %d seed %d step %d: filtered victim %d,%v; eight candidates %d,%v", class, seed, step, ka, oka, kb, okb)
					}
				}
				for a.Len() > capacity {
					ka, _ := a.Evict(nil)
					kb, _ := b.Evict(nil)
					if ka != kb {
						t.Fatalf("class %d seed %d step %d: victim %d; eight candidates %d (choice %d, %d)", class, seed, step, ka, kb, pa.choice, pb.choice)
					}
				}
				if a.Len() != b.Len() {
					t.Fatalf("class %d seed %d step %d: Len %d, eight candidates %d", class, seed, step, a.Len(), b.Len())
				}
			}
			if !pa.shadows[8].dormant || !pa.switched {
				t.Fatalf("class %d seed %d: class shadow dormant %v, switched %v", class, seed, pa.shadows[8].dormant, pa.switched)
			}
			checkAdaptiveSlots(t, pa)
		}
	}

}

// TestAdaptiveRelearnEdges checks the class rule where its arithmetic could
// go wrong: no births at all (0/0), counts decayed to denormals and to
// zero, huge counts, a class just below classMinBirths, and class 0, which
// is never low however rarely it comes back.
func TestAdaptiveRelearnEdges(t *testing.T) {
	p := mustNew(t, Adaptive, 8).(*adaptive)
	if p.relearn() || slices.Contains(p.low[:], true) {
		t.Fatal("no births: a class was found low")
	}
	p.born[0], p.born[1], p.again[1] = 1e6, 1e6, 1e6 // class 0 never seen again
	p.born[2], p.again[2] = classMinBirths-1e-9, 0   // too few births to judge
	p.born[3], p.again[3] = math.MaxFloat64/4, 0     // huge: the totals stay finite
	p.relearn()
	if p.low[0] || !p.low[3] || p.low[2] || p.low[1] {
		t.Fatalf("low classes %v %v %v %v; want class 3 only", p.low[0], p.low[1], p.low[2], p.low[3])
	}
	for step := 0; step < 20000; step++ { // decay through denormals to zero
		p.relearn()
		for c := range p.born {
			if math.IsNaN(p.born[c]) || math.IsNaN(p.again[c]) || math.IsInf(p.born[c], 0) {
				t.Fatalf("step %d: class %d counts %v, %v", step, c, p.born[c], p.again[c])
			}
		}
	}
	// ×0.9 rounds a count of a few denormal units back to itself, so the
	// counts stop short of zero; they must still judge nothing.
	if p.born[3] > 1e-300 || slices.Contains(p.low[:], true) {
		t.Fatalf("after the counts decayed to %v, low classes remain: %v", p.born[3], p.low[:4])
	}
}

// TestAdaptiveMissThenArrivalClass: a key a tier hears of first as a miss
// (Miss: no class known) counts, at its arrival, for the class it arrives
// with — its first use as a birth of that class, a second miss before the
// arrival as a use again — not for class 0 (every block below the GPU is
// missed before it is written down: the disk learned no class at all).
func TestAdaptiveMissThenArrivalClass(t *testing.T) {
	p := mustNew(t, Adaptive, 8).(*adaptive)
	p.Miss(1)
	p.Miss(2)
	p.Miss(2) // missed in two requests before it arrives
	if p.born != [len(p.born)]float64{} || p.again != [len(p.again)]float64{} {
		t.Fatalf("misses counted for a class before the arrival: born %v again %v", p.born[:8], p.again[:8])
	}
	p.AddHint(1, Hint{Class: 5})
	p.AddHint(2, Hint{Class: 6})
	p.AddHint(3, Hint{Class: 7}) // no miss: born at its Add, as before
	p.Miss(4)                    // never arrives: counted nowhere
	for c, want := range map[uint8][2]float64{0: {0, 0}, 5: {1, 0}, 6: {1, 1}, 7: {1, 0}} {
		if p.born[c] != want[0] || p.again[c] != want[1] {
			t.Errorf("class %d: born %v again %v, want %v", c, p.born[c], p.again[c], want)
		}
	}
	if e := p.entries[p.index[2]]; e.class != 6 || e.count != 2 {
		t.Errorf("key 2: class %d count %d, want 6 and 2", e.class, e.count)
	}
	p.Access(1) // its second use
	if p.again[5] != 1 {
		t.Errorf("class 5 again %v after key 1's second use, want 1", p.again[5])
	}
}
