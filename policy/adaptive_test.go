package policy

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkAdaptive verifies every lane's heap (order and back pointers), the
// index and the free list of an Adaptive policy.
func checkAdaptive(t *testing.T, p *adaptive) {
	t.Helper()
	lanes := []*lane{&p.real}
	for s := range p.shadows {
		lanes = append(lanes, &p.shadows[s])
	}
	for _, l := range lanes {
		if l.id > 0 && len(l.heap) > p.capacity {
			t.Fatalf("shadow %d holds %d keys, capacity %d", l.id, len(l.heap), p.capacity)
		}
		for j, i := range l.heap {
			if got := p.entries[i].pos[l.id]; got != int32(j) {
				t.Fatalf("lane %d slot %d: entry says slot %d", l.id, j, got)
			}
			if j > 0 && p.less(l, i, l.heap[(j-1)/2]) {
				t.Fatalf("lane %d slot %d ranks below its parent", l.id, j)
			}
		}
	}
	// The vote lanes: with a vote on, each key of the real cache is in the
	// lane of the number of voting shadows that hold it; otherwise in none.
	inVotes := 0
	for h := range p.votes {
		v := &p.votes[h]
		if p.voters == nil && len(v.heap) > 0 {
			t.Fatalf("no vote, but vote lane %d holds %d keys", h, len(v.heap))
		}
		for j, i := range v.heap {
			e := &p.entries[i]
			if e.pos[voteSlot] != int32(j) || e.pos[0] < 0 {
				t.Fatalf("vote lane %d slot %d: entry says slot %d, real slot %d", h, j, e.pos[voteSlot], e.pos[0])
			}
			if int(e.held) != h || p.heldBy(i) != e.held {
				t.Fatalf("key %d in vote lane %d: held %d, %d voting shadows hold it", e.key, h, e.held, p.heldBy(i))
			}
			if j > 0 && p.less(v, i, v.heap[(j-1)/2]) {
				t.Fatalf("vote lane %d slot %d ranks below its parent", h, j)
			}
		}
		inVotes += len(v.heap)
	}
	if p.voters != nil && inVotes != len(p.real.heap) {
		t.Fatalf("%d keys in vote lanes, %d in the real cache", inVotes, len(p.real.heap))
	}
	if p.voters != nil && (p.votes[0].rank != p.real.rank || p.votes[0].window != p.real.window || p.votes[0].class != p.real.class) {
		t.Fatalf("vote lanes ranked by %v/%d, the real cache by %v/%d", p.votes[0].rank, p.votes[0].window, p.real.rank, p.real.window)
	}
	if got := len(p.index) + len(p.free); got != len(p.entries) {
		t.Fatalf("%d indexed + %d free != %d entries", len(p.index), len(p.free), len(p.entries))
	}
	for k, i := range p.index {
		e := &p.entries[i]
		if e.key != k {
			t.Fatalf("index %d -> entry of key %d", k, e.key)
		}
		for l := len(lanes); l < maxLanes; l++ {
			if e.pos[l] != -1 {
				t.Fatalf("key %d has a slot %d in unused lane %d", k, e.pos[l], l)
			}
		}
		if e.pos[voteSlot] >= 0 && (p.voters == nil || e.pos[0] < 0) {
			t.Fatalf("key %d has vote slot %d, real slot %d, voters %v", k, e.pos[voteSlot], e.pos[0], p.voters)
		}
	}
}

// refAdaptive models one fixed ranking (no shadows) with maps and a linear
// scan: the victim is any evictable resident key of least rank, deepest
// among equals.
type refAdaptive struct {
	cand      Candidate
	window    int64
	clock     int64
	epoch     int64
	lastDepth int
	hist      map[Key]*refEntry
	res       map[Key]bool
	// The classes, learned every period touches: keys first seen in each
	// and those seen again (decayed), and the classes found low.
	period, next int64
	born, again  map[uint8]float64
	low          map[uint8]bool
}

type refEntry struct {
	t1, t2  int64
	count   int64
	depth   int
	partial bool
	awaited bool
	unborn  bool // only Miss touched it: its class and counts wait for its arrival
	class   uint8
}

func newRefAdaptive(c Candidate, capacity int) *refAdaptive {
	period := max(int64(minPeriod), int64(capacity)) // Period 1
	return &refAdaptive{cand: c, window: windowTouches(c.Window, capacity), lastDepth: -1,
		hist: map[Key]*refEntry{}, res: map[Key]bool{},
		period: period, next: period, born: map[uint8]float64{}, again: map[uint8]float64{}, low: map[uint8]bool{}}
}

func (m *refAdaptive) touch(k Key, h Hint, admit bool) {
	m.clock++
	if h.Depth <= 0 || h.Depth <= m.lastDepth {
		m.epoch = m.clock
	}
	m.lastDepth = h.Depth
	e := m.hist[k]
	if e == nil {
		e = &refEntry{t1: never, t2: never, unborn: !admit}
		m.hist[k] = e
	}
	if e.t1 != m.epoch {
		e.t2, e.t1 = e.t1, m.epoch
		e.count++
		switch {
		case e.unborn:
		case e.count == 1:
			e.class = h.Class
			m.born[e.class]++
		case e.count == 2:
			m.again[e.class]++
		}
	}
	e.depth, e.partial = h.Depth, h.Partial
	if m.clock >= m.next {
		m.next = m.clock + m.period
		m.relearn()
	}
}

// relearn is the classes' rule, written directly: a class of at least
// classMinBirths keys is low when its share of keys seen again is below
// classOddsRatio times the share over all classes; then every count decays.
func (m *refAdaptive) relearn() {
	var born, again float64
	for c := range 256 {
		born += m.born[uint8(c)]
		again += m.again[uint8(c)]
	}
	for c := 1; c < 256; c++ {
		b, a := m.born[uint8(c)], m.again[uint8(c)]
		m.low[uint8(c)] = b >= classMinBirths && a/b < classOddsRatio*again/born
	}
	for c := range m.born {
		m.born[c] *= classDecay
	}
	for c := range m.again {
		m.again[c] *= classDecay
	}
}

func (m *refAdaptive) add(k Key, h Hint) {
	if e := m.hist[k]; e != nil && e.awaited && !m.res[k] {
		// The arrival of a key Miss counted: a new epoch, no new use.
		m.clock++
		m.epoch, m.lastDepth = m.clock, math.MaxInt
		e.awaited, e.t1, e.depth, e.partial = false, m.clock, h.Depth, h.Partial
		if e.unborn { // its uses so far count for the class it arrives with
			e.unborn, e.class = false, h.Class
			m.born[e.class]++
			if e.count >= 2 {
				m.again[e.class]++
			}
		}
		m.res[k] = true
		return
	}
	m.touch(k, h, true)
	m.res[k] = true
}

func (m *refAdaptive) miss(k Key) {
	if !m.res[k] {
		m.touch(k, Hint{}, false)
		m.hist[k].awaited = true
		m.lastDepth = math.MaxInt
	}
}

func (m *refAdaptive) access(k Key, h Hint) {
	if m.res[k] {
		m.touch(k, h, true)
	}
}

// rank returns a class (lower goes first) and a rank within the class.
func (m *refAdaptive) rank(k Key) (int, float64) {
	e := m.hist[k]
	t1, t2, w := float64(e.t1), float64(e.t2), float64(m.window)
	if m.cand.Window == math.Inf(1) {
		w = math.Inf(1)
	}
	seenOnce := e.t2 == never
	switch {
	case e.partial && seenOnce, seenOnce && m.cand.Class && m.low[e.class]:
		return 0, t1
	case m.cand.Rank == RankSecondUse:
		if seenOnce {
			if math.IsInf(w, 1) {
				return 1, t1
			}
			return 2, t1 - w
		}
		return 2, max(t2, t1-w)
	case m.cand.Rank == RankFrequencyNewFirst && seenOnce:
		return 1, -t1
	default:
		doublings := float64(int(math.Log2(float64(e.count))))
		if math.IsInf(w, 1) {
			return 2 + int(e.count), t1
		}
		return 2, t1 + w*doublings
	}
}

// victims returns every evictable resident key the reference may evict.
func (m *refAdaptive) victims(evictable func(Key) bool) []Key {
	var best []Key
	for k := range m.res {
		if evictable != nil && !evictable(k) {
			continue
		}
		if len(best) == 0 {
			best = []Key{k}
			continue
		}
		b := best[0]
		ck, rk := m.rank(k)
		cb, rb := m.rank(b)
		switch {
		case ck < cb || (ck == cb && rk < rb) || (ck == cb && rk == rb && m.hist[k].depth > m.hist[b].depth):
			best = []Key{k}
		case ck == cb && rk == rb && m.hist[k].depth == m.hist[b].depth:
			best = append(best, k)
		}
	}
	return best
}

func randomHint(rng *rand.Rand) Hint {
	return Hint{Depth: rng.IntN(4), Partial: rng.IntN(5) == 0}
}

// TestAdaptiveModel drives a single-ranking Adaptive policy and the
// reference with the same random hinted operations: victims must be among
// the reference's, Len and Contains must agree after every step.
//
// The candidates with Class also see a stream of new keys of class 2, a
// few of them touched again, beside the usual keys of class 1: class 2 is
// found low (its keys seen once go first) and, as the stream's reuse
// varies, found low again or not at later periods.
func TestAdaptiveModel(t *testing.T) {
	const keySpace, steps = 40, 2000
	cands := []Candidate{
		{Rank: RankSecondUse, Window: 0}, {Rank: RankSecondUse, Window: 0.5}, {Rank: RankSecondUse, Window: math.Inf(1)},
		{Rank: RankFrequency, Window: 1}, {Rank: RankFrequency, Window: math.Inf(1)}, {Rank: RankFrequencyNewFirst, Window: 2},
		{Rank: RankFrequencyNewFirst, Window: math.Inf(1)},
		{Rank: RankSecondUse, Window: 1, Class: true}, {Rank: RankFrequency, Window: 1, Class: true},
		{Rank: RankFrequencyNewFirst, Window: 0, Class: true},
	}
	lowSeen, relearned := false, false
	for ci, c := range cands {
		for seed := range uint64(3) {
			rng := rand.New(rand.NewPCG(seed, uint64(ci)))
			capacity := 1 + rng.IntN(20)
			hp, err := NewAdaptive(capacity, AdaptiveConfig{Candidates: []Candidate{c}})
			if err != nil {
				t.Fatal(err)
			}
			p := hp.(*adaptive)
			ref := newRefAdaptive(c, capacity)
			fresh := Key(keySpace) // the class-2 stream: keys from keySpace up
			key := func() (Key, uint8) {
				if !c.Class {
					return Key(rng.IntN(keySpace)), 0
				}
				switch r := rng.IntN(10); {
				case r < 3:
					fresh++
					return fresh, 2
				case r < 3+(phase(fresh)%4)/2: // the stream's reuse comes and goes
					return fresh - Key(rng.IntN(3)), 2
				}
				return Key(rng.IntN(keySpace)), 1
			}
			for step := range steps * (1 + b2i(c.Class)) {
				k, class := key()
				switch op := rng.IntN(10); {
				case op < 4:
					h := randomHint(rng)
					h.Class = class
					p.AddHint(k, h)
					ref.add(k, h)
				case op < 6:
					h := randomHint(rng)
					h.Class = class
					p.AccessHint(k, h)
					ref.access(k, h)
				case op < 7:
					p.Remove(k)
					delete(ref.res, k)
				case op < 8 && rng.IntN(2) == 0:
					p.Miss(k)
					ref.miss(k)
				default:
					var ev func(Key) bool
					if rng.IntN(3) > 0 {
						mask := rng.Uint64()
						ev = func(k Key) bool { return mask>>(k%64)&1 == 1 }
					}
					want := ref.victims(ev)
					got, ok := p.Evict(ev)
					if ok != (len(want) > 0) || (ok && !slices.Contains(want, got)) {
						t.Fatalf("%+v seed %d step %d: Evict = %d, %v; reference allows %v", c, seed, step, got, ok, want)
					}
					if ok {
						delete(ref.res, got)
					}
				}
				checkAdaptive(t, p)
				if p.low != [256]bool(refLow(ref)) {
					t.Fatalf("%+v seed %d step %d: low classes differ from the reference's", c, seed, step)
				}
				for cl := range 256 {
					if p.born[cl] != ref.born[uint8(cl)] || p.again[cl] != ref.again[uint8(cl)] {
						t.Fatalf("%+v seed %d step %d: class %d born %v again %v, reference %v and %v",
							c, seed, step, cl, p.born[cl], p.again[cl], ref.born[uint8(cl)], ref.again[uint8(cl)])
					}
				}
				if lowSeen && !p.low[2] {
					relearned = true // low, then not: the rule follows the stream
				}
				lowSeen = lowSeen || p.low[2]
				if p.Len() != len(ref.res) {
					t.Fatalf("%+v seed %d step %d: Len %d, reference %d", c, seed, step, p.Len(), len(ref.res))
				}
				for k := range Key(keySpace) {
					if p.Contains(k) != ref.res[k] {
						t.Fatalf("%+v seed %d step %d: Contains(%d) = %v", c, seed, step, k, p.Contains(k))
					}
				}
			}
		}
	}
	if !lowSeen || !relearned {
		t.Fatalf("class 2 found low %v, then not %v: the class rule went unexercised", lowSeen, relearned)
	}
}

// phase turns the class-2 stream's length into a phase, so that its reuse
// changes as it grows.
func phase(fresh Key) int { return int(fresh) / 200 }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func refLow(m *refAdaptive) (low [256]bool) {
	for c, l := range m.low {
		low[c] = l
	}
	return low
}

// TestAdaptiveMissCountsOneUse: a key Miss counted and then Add admitted
// was used once, not twice, so LRU-2 evicts it before a key used twice;
// a key missed twice before it arrives was used twice.
func TestAdaptiveMissCountsOneUse(t *testing.T) {
	hp, err := NewAdaptive(4, AdaptiveConfig{Candidates: []Candidate{{Rank: RankSecondUse, Window: math.Inf(1)}}})
	if err != nil {
		t.Fatal(err)
	}
	p := hp.(*adaptive)
	p.Add(1)
	p.Access(1) // 1: used twice
	p.Miss(2)
	p.Add(2) // 2: asked for once, then arrived
	p.Miss(3)
	p.Miss(3)
	p.Add(3)  // 3: asked for twice before it arrived
	p.Miss(1) // resident: ignored
	if got := drain(t, p, nil); !slices.Equal(got, []Key{2, 1, 3}) {
		t.Fatalf("evicted %v, want [2 1 3] (2 seen once; 1's second use before 3's)", got)
	}
}

// TestAdaptiveMissScoresShadows: a missed key counts as a hit in a shadow
// that holds it, and a shadow that does not hold it does not take it in
// (the tier does not either: the block arrives later, by Add).
func TestAdaptiveMissScoresShadows(t *testing.T) {
	p := mustNew(t, Adaptive, 2).(*adaptive)
	p.Add(1)
	if k, ok := p.Evict(nil); !ok || k != 1 {
		t.Fatalf("Evict = %d, %v", k, ok)
	}
	before := make([]float64, len(p.shadows))
	for s := range p.shadows {
		if p.shadows[s].dormant {
			continue // the class candidate, with no class given: see TestAdaptiveDormantClassShadow
		}
		if p.entries[p.index[1]].pos[p.shadows[s].id] < 0 {
			t.Fatalf("shadow %d lost key 1 under its capacity", s)
		}
		before[s] = p.shadows[s].hits
	}
	p.Miss(1)
	p.Miss(7)
	for s := range p.shadows {
		if p.shadows[s].dormant {
			continue
		}
		if got := p.shadows[s].hits; got != before[s]+1 {
			t.Fatalf("shadow %d: %v hits after missing a key it holds, want %v", s, got, before[s]+1)
		}
		if p.entries[p.index[7]].pos[p.shadows[s].id] >= 0 {
			t.Fatalf("shadow %d took in missed key 7", s)
		}
	}
	if p.Contains(1) || p.Contains(7) || p.Len() != 0 {
		t.Fatalf("Miss admitted a key: Len %d", p.Len())
	}
	p.Add(7)
	for s := range p.shadows {
		if p.shadows[s].dormant {
			continue
		}
		if p.entries[p.index[7]].pos[p.shadows[s].id] < 0 {
			t.Fatalf("shadow %d did not take in key 7 on its arrival", s)
		}
	}
	checkAdaptive(t, p)
}

// TestAdaptiveWithShadows runs the default policy (nine shadows, switching)
// against a plain set: whatever ranking it uses, residency follows Add,
// Remove and Evict (Miss admits nothing), victims pass the filter, and
// every heap stays valid after every step. Few keys, so that missed keys
// arrive while shadows still hold them.
func TestAdaptiveWithShadows(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const capacity = 8
	p := mustNew(t, Adaptive, capacity).(*adaptive)
	p.switched = true // vote from the first adaptation step with enough evidence
	res := map[Key]bool{}
	voted := 0
	for step := range 20000 {
		k := Key(rng.IntN(24))
		switch op := rng.IntN(10); {
		case op < 5:
			p.AddHint(k, randomHint(rng))
			res[k] = true
		case op < 6:
			p.AccessHint(k, randomHint(rng))
		case op < 7:
			p.Miss(k)
		case op < 8:
			p.Remove(k)
			delete(res, k)
		default:
			mask := rng.Uint64()
			got, ok := p.Evict(func(k Key) bool { return mask>>(k%64)&1 == 1 })
			if ok && (!res[got] || mask>>(got%64)&1 == 0) {
				t.Fatalf("step %d: victim %d resident %v, evictable %v", step, got, res[got], mask>>(got%64)&1 == 1)
			}
			if ok {
				delete(res, got)
			}
		}
		if p.Len() != len(res) || p.Contains(k) != res[k] {
			t.Fatalf("step %d: Len %d Contains(%d) %v; want %d, %v", step, p.Len(), k, p.Contains(k), len(res), res[k])
		}
		checkAdaptive(t, p)
		if p.voters != nil {
			voted++
		}
	}
	if voted == 0 {
		t.Fatal("no vote in 20,000 steps: the vote lanes were not exercised")
	}
}

// voteEdgeOf returns the window edge the next voted eviction of p will
// draw (the same samples from a copy of its generator), without drawing it.
func voteEdgeOf(p *adaptive) int32 {
	rng, h := p.rng, p.real.heap
	sample := make([]int32, voteSamples)
	for k := range sample {
		rng = xorshift(rng)
		sample[k] = h[rng%uint64(len(h))]
	}
	slices.SortStableFunc(sample, func(a, b int32) int { return p.cmp(&p.real, a, b) })
	return sample[voteEdge-1]
}

// cmp orders entries a and b as lane l ranks them (0 for a tie).
func (p *adaptive) cmp(l *lane, a, b int32) int {
	switch {
	case p.less(l, a, b):
		return -1
	case p.less(l, b, a):
		return 1
	}
	return 0
}

// forceSwitch sets the shadows' hit counts so that, at the next adaptation
// step, the choice switches to another voter with a different ranking and
// the same shadows vote: the vote lanes must follow the new ranking.
func forceSwitch(p *adaptive) bool {
	for _, id := range p.voters {
		s := &p.shadows[id-1]
		if id-1 != p.choice && (s.rank != p.real.rank || s.window != p.real.window) {
			for t := range p.shadows {
				p.shadows[t].hits = 0
			}
			for _, v := range p.voters {
				p.shadows[v-1].hits = 1950 * minEvidence
			}
			s.hits = 2000 * minEvidence
			return true
		}
	}
	return false
}

// TestAdaptiveVote checks every voted eviction against a reference built
// from the definition: the window's edge is the voteEdge-th lowest of the
// samples the policy will draw; among the keys ranked no later than the
// edge, those held by the fewest voting shadows that have an evictable key
// give the victim, the lowest-ranked evictable one of them (any of equal
// rank); with none, the lowest-ranked evictable key. Every other eviction
// goes through a filter, as the tiers' do; the vote must move victims both
// ways.
func TestAdaptiveVote(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const capacity = 64
	p := mustNew(t, Adaptive, capacity).(*adaptive)
	var voted, forced int
	var moved [2]int // victims the vote moved, with and without a filter
	for step := range 100000 {
		// Requests of 1-8 blocks: a popular few chains and a long tail, so
		// that the rankings differ and the choice switches.
		root := rng.IntN(40)
		if rng.IntN(3) == 0 {
			root = 40 + rng.IntN(2000)
		}
		n := 1 + rng.IntN(8)
		for d := range n {
			p.AddHint(Key(root*8+d), Hint{Depth: d + 1})
		}
		for p.Len() > capacity {
			if p.voters == nil {
				if _, ok := p.Evict(nil); !ok {
					t.Fatal("Evict found nothing in a full cache")
				}
				continue
			}
			order := slices.Clone(p.real.heap)
			slices.SortStableFunc(order, func(a, b int32) int { return p.cmp(&p.real, a, b) })
			evictable := func(Key) bool { return true }
			var filter func(Key) bool
			if voted%2 == 1 { // turns down about a quarter of keys
				mask := rng.Uint64() | rng.Uint64()
				evictable = func(k Key) bool { return mask>>(k%64)&1 == 1 }
				filter = evictable
			}
			ok := func(i int32) bool { return evictable(p.entries[i].key) }
			// The reference: the first acceptable entry, then its ties.
			edge := voteEdgeOf(p)
			first := slices.IndexFunc(order, ok)
			pick := -1
			for held := int8(0); held <= int8(len(p.voters)) && pick < 0; held++ {
				for j, i := range order {
					if p.less(&p.real, edge, i) {
						break
					}
					if p.heldBy(i) == held && ok(i) {
						pick = j
						break
					}
				}
			}
			if pick < 0 {
				pick = first
			}
			var want []Key
			for _, i := range order {
				if p.cmp(&p.real, i, order[pick]) == 0 && p.heldBy(i) == p.heldBy(order[pick]) && ok(i) {
					want = append(want, p.entries[i].key)
				}
			}
			got, evicted := p.Evict(filter)
			voted++
			if !evicted || !slices.Contains(want, got) {
				t.Fatalf("step %d (filter %v): Evict = %d, %v; want one of %v", step, filter != nil, got, evicted, want)
			}
			if p.cmp(&p.real, order[first], order[pick]) < 0 {
				moved[min(voted%2, 1)]++ // voted was counted: 0 filtered, 1 not
			}
		}
		if step%16 == 0 {
			checkAdaptive(t, p)
		}
		if step%500 == 499 && p.voters != nil && forceSwitch(p) {
			forced++
		}
		if voted > 4000 && moved[0] > 0 && moved[1] > 0 && forced >= 3 {
			break
		}
	}
	checkAdaptive(t, p)
	if moved[0] == 0 || moved[1] == 0 || forced < 3 {
		t.Fatalf("%d voted evictions, %d with a filter and %d without not the first evictable key, %d forced switches: the vote was not exercised",
			voted, moved[0], moved[1], forced)
	}
}

// TestAdaptiveVoteGates: no vote before the choice has switched, however
// much evidence (two identical candidates never part), nor before the
// leader holds minEvidence hits; then both shadows vote, from each
// adaptation step at which the leader holds them to the next.
func TestAdaptiveVoteGates(t *testing.T) {
	same := Candidate{Rank: RankSecondUse, Window: 1}
	hp, err := NewAdaptive(16, AdaptiveConfig{Candidates: []Candidate{same, same}})
	if err != nil {
		t.Fatal(err)
	}
	p := hp.(*adaptive)
	touches := 0
	touch := func(n int) { // 20 keys in a cache of 16: hits and evictions
		for range n {
			p.Add(Key(touches % 20 * (1 + touches%3%2)))
			touches++
			for p.Len() > p.capacity {
				p.Evict(nil)
			}
		}
	}
	for range 20 * minPeriod { // thousands of hits, no switch
		touch(1)
		if p.switched || p.voters != nil {
			t.Fatalf("after %d touches: switched %v, voters %v", touches, p.switched, p.voters)
		}
	}
	if p.shadows[0].hits < minEvidence*adaptDecay {
		t.Fatalf("%v hits: the test never reached minEvidence", p.shadows[0].hits)
	}
	q, _ := NewAdaptive(16, AdaptiveConfig{Candidates: []Candidate{same, same}})
	p = q.(*adaptive)
	p.switched = true // as if the choice had switched
	votes := 0
	for range 20 * minPeriod {
		touch(1)
		if p.voters != nil && p.shadows[0].hits < minEvidence*adaptDecay {
			t.Fatalf("a vote with %v hits, before the leader held %d", p.shadows[0].hits, minEvidence)
		}
		if p.voters != nil {
			if !slices.Equal(p.voters, []int{1, 2}) {
				t.Fatalf("voters %v; want both shadows", p.voters)
			}
			votes++
		}
		checkAdaptive(t, p)
	}
	if votes == 0 {
		t.Fatal("no vote after the switch with evidence")
	}
}

// TestAdaptiveWaitsForEvidence: the shadows' hit counts decay only once the
// leader holds minEvidence hits, so a small cache, which sees few hits a
// period, compares its candidates on enough of them.
func TestAdaptiveWaitsForEvidence(t *testing.T) {
	p := mustNew(t, Adaptive, 4).(*adaptive)
	touches := 0
	touch := func(n int) {
		for range n {
			p.Add(Key(touches % 2)) // two keys: every touch after the first two hits in every shadow
			touches++
		}
	}
	touch(3 * minPeriod) // three adaptation steps, 766 hits
	for s, l := range p.shadows {
		if l.dormant {
			continue // the class candidate, with no class given: see TestAdaptiveDormantClassShadow
		}
		if l.hits != float64(touches-2) {
			t.Fatalf("after %d touches shadow %d holds %v hits, want %d undecayed", touches, s, l.hits, touches-2)
		}
	}
	touch(3 * minPeriod) // past minEvidence: the counts decay
	for s, l := range p.shadows {
		if l.dormant {
			continue
		}
		if l.hits >= float64(touches-2) {
			t.Fatalf("after %d touches shadow %d holds %v hits, want them decayed", touches, s, l.hits)
		}
	}
}

// TestAdaptiveChainOrder: within one request the partial last block goes
// first, then the deeper blocks before their ancestors; a block seen in an
// earlier request (remembered after its eviction) outlives them all.
func TestAdaptiveChainOrder(t *testing.T) {
	hp, err := NewAdaptive(16, AdaptiveConfig{Candidates: []Candidate{{Rank: RankSecondUse, Window: math.Inf(1)}}})
	if err != nil {
		t.Fatal(err)
	}
	hp.AddHint(1, Hint{Depth: 0})
	hp.AddHint(9, Hint{Depth: 1, Partial: true})
	if k, _ := hp.Evict(nil); k != 9 {
		t.Fatalf("first victim %d, want the partial block 9", k)
	}
	if k, _ := hp.Evict(nil); k != 1 {
		t.Fatalf("second victim %d, want 1", k)
	}
	// 1 is gone but remembered: its second use ranks it above new blocks.
	for d, k := range []Key{1, 2, 3, 4} {
		hp.AddHint(k, Hint{Depth: d, Partial: k == 4})
	}
	var got []Key
	for {
		k, ok := hp.Evict(nil)
		if !ok {
			break
		}
		got = append(got, k)
	}
	if want := []Key{4, 3, 2, 1}; !slices.Equal(got, want) {
		t.Fatalf("victims %v, want %v", got, want)
	}
}

// TestAdaptiveHistoryBound: ids resident nowhere are forgotten once the
// history holds MinHistory ids, so memory stays bounded under a scan: by the
// bound plus the ids the real cache and the shadows hold.
func TestAdaptiveHistoryBound(t *testing.T) {
	const capacity, bound = 4, 64
	hp, err := NewAdaptive(capacity, AdaptiveConfig{History: 1, MinHistory: bound})
	if err != nil {
		t.Fatal(err)
	}
	p := hp.(*adaptive)
	limit := bound + (1+len(p.shadows))*capacity
	for k := range Key(10000) {
		p.Add(k)
		for p.Len() > capacity {
			p.Evict(nil)
		}
		if n := len(p.index); n > limit {
			t.Fatalf("after %d ids the history holds %d, bound %d + %d resident", k+1, n, bound, limit-bound)
		}
	}
	if len(p.entries) > limit+1 {
		t.Fatalf("%d entries, bound %d + %d resident", len(p.entries), bound, limit-bound)
	}
	checkAdaptive(t, p)
}

// TestAdaptiveHistorySweepsAmortized: with a history bound smaller than what
// the shadows hold, each sweep of the history still frees room for half a
// bound of ids, so a stream of new ids does not sweep on every insert.
func TestAdaptiveHistorySweepsAmortized(t *testing.T) {
	const capacity, steps = 100, 20000
	hp, err := NewAdaptive(capacity, AdaptiveConfig{History: 1, MinHistory: 1})
	if err != nil {
		t.Fatal(err)
	}
	p := hp.(*adaptive)
	rng := rand.New(rand.NewPCG(1, 2))
	inserts := 0 // ids the history did not hold
	for step := range steps {
		k := Key(rng.IntN(3 * capacity))
		if rng.IntN(2) == 0 {
			k = Key(1_000_000 + step)
		}
		if _, ok := p.index[k]; !ok {
			inserts++
		}
		p.Add(k)
		for p.Len() > capacity {
			p.Evict(nil)
		}
	}
	if max := inserts/(p.histLimit/2) + 1; p.forgets > max {
		t.Fatalf("%d sweeps of the history for %d inserted ids, want at most %d (one per %d)", p.forgets, inserts, max, p.histLimit/2)
	}
	if p.forgets == 0 {
		t.Fatal("the history was never swept")
	}
	checkAdaptive(t, p)
}

// TestAdaptiveCountSaturates: a key's use count stops at MaxInt32 instead of
// wrapping, and under an infinite frequency window the most used key stays
// the last to go.
func TestAdaptiveCountSaturates(t *testing.T) {
	for _, r := range []Ranking{RankFrequency, RankFrequencyNewFirst} {
		hp, err := NewAdaptive(4, AdaptiveConfig{Candidates: []Candidate{{Rank: r, Window: math.Inf(1)}}})
		if err != nil {
			t.Fatal(err)
		}
		p := hp.(*adaptive)
		p.Add(1)
		p.Access(1)
		p.entries[p.index[1]].count = math.MaxInt32 - 1
		p.Access(1)
		p.Access(1)
		p.Add(2)
		p.Access(2)
		if c := p.entries[p.index[1]].count; c != math.MaxInt32 {
			t.Fatalf("ranking %d: count %d after MaxInt32 uses, want %d", r, c, int32(math.MaxInt32))
		}
		if k, _ := p.Evict(nil); k != 2 {
			t.Fatalf("ranking %d: evicted key %d (used MaxInt32 times) before key 2 (used twice)", r, k)
		}
	}
}

// TestAdaptiveNewFirstInfiniteCountsFirst: RankFrequencyNewFirst with an
// infinite window is RankFrequency's count-first order for keys seen again.
func TestAdaptiveNewFirstInfiniteCountsFirst(t *testing.T) {
	for _, r := range []Ranking{RankFrequency, RankFrequencyNewFirst} {
		hp, err := NewAdaptive(4, AdaptiveConfig{Candidates: []Candidate{{Rank: r, Window: math.Inf(1)}}})
		if err != nil {
			t.Fatal(err)
		}
		hp.Add(1)
		hp.Access(1)
		hp.Access(1) // three uses, older
		hp.Add(2)
		hp.Access(2) // two uses, newer
		if k, _ := hp.Evict(nil); k != 2 {
			t.Errorf("ranking %d, infinite window: evicted %d, want 2 (fewer uses)", r, k)
		}
	}
}

// TestAdaptiveHugePeriod: a Period too large for the clock means "adapt
// almost never", not the shortest period.
func TestAdaptiveHugePeriod(t *testing.T) {
	for _, per := range []float64{math.Inf(1), 1e30} {
		hp, err := NewAdaptive(1000, AdaptiveConfig{Period: per})
		if err != nil {
			t.Fatalf("Period %v: %v", per, err)
		}
		if got := hp.(*adaptive).period; got < 1<<40 {
			t.Errorf("Period %v x 1000 blocks: adapts every %d touches", per, got)
		}
	}
}

func TestNewAdaptiveValidates(t *testing.T) {
	bad := []AdaptiveConfig{
		{Candidates: []Candidate{{Rank: 0}}},
		{Candidates: []Candidate{{Rank: RankSecondUse, Window: -1}}},
		{Candidates: make([]Candidate, maxLanes)},
		{Period: -1},
		{History: 0.5},
		{MinHistory: -1},
		{Period: math.NaN()},
	}
	for _, c := range bad {
		if _, err := NewAdaptive(10, c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("NewAdaptive(10, %+v): %v, want ErrBadConfig", c, err)
		}
	}
	if _, err := NewAdaptive(0, AdaptiveConfig{}); !errors.Is(err, ErrBadCapacity) {
		t.Errorf("NewAdaptive(0): %v, want ErrBadCapacity", err)
	}
	c := AdaptiveConfig{Candidates: []Candidate{{Rank: RankFrequency, Window: 2}}}
	if _, err := NewAdaptive(10, c); err != nil || c.Period != 0 {
		t.Fatalf("NewAdaptive: %v; caller's Period now %v", err, c.Period)
	}
}

// TestAdaptiveEvictFilterKeepsSlots: keys the filter rejects keep their exact
// heap slots, so later choices among equal ranks do not depend on what was
// rejected; the victim is still the lowest-ranked evictable key.
func TestAdaptiveEvictFilterKeepsSlots(t *testing.T) {
	hp, err := NewAdaptive(64, AdaptiveConfig{Candidates: []Candidate{{Rank: RankFrequency, Window: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	p := hp.(*adaptive)
	rng := rand.New(rand.NewPCG(3, 4))
	for range 400 {
		p.Add(Key(rng.IntN(100)))
		for p.Len() > 64 {
			p.Evict(nil)
		}
	}
	before := slices.Clone(p.real.heap)
	if _, ok := p.Evict(func(Key) bool { return false }); ok {
		t.Fatal("evicted a key every filter rejected")
	}
	if !slices.Equal(before, p.real.heap) {
		t.Fatal("rejecting every key moved keys in the heap")
	}
	// Reject the eight lowest-ranked keys: the ninth goes, the rest stay put.
	order := slices.Clone(p.real.heap)
	slices.SortFunc(order, func(a, b int32) int {
		switch {
		case p.less(&p.real, a, b):
			return -1
		case p.less(&p.real, b, a):
			return 1
		}
		return 0
	})
	rejected := map[Key]bool{}
	for _, i := range order[:8] {
		rejected[p.entries[i].key] = true
	}
	k, ok := p.Evict(func(k Key) bool { return !rejected[k] })
	if want := p.entries[order[8]].key; !ok || (k != want && p.less(&p.real, order[8], p.index[k])) {
		t.Fatalf("evicted %d, want %d (the lowest-ranked key not rejected)", k, want)
	}
	checkAdaptive(t, p)
}

// TestOutputClass: one class per power of two of the output length, 1 for
// none (or a negative length), and every length maps below 256.
func TestOutputClass(t *testing.T) {
	for _, c := range []struct {
		tokens int
		want   uint8
	}{{-5, 1}, {0, 1}, {1, 2}, {2, 3}, {3, 3}, {4, 4}, {64, 8}, {65, 8}, {127, 8}, {128, 9}, {math.MaxInt, 64}} {
		if got := OutputClass(c.tokens); got != c.want {
			t.Errorf("OutputClass(%d) = %d, want %d", c.tokens, got, c.want)
		}
	}
}

// TestAdaptiveDormantClassShadow: the default policy's class candidate
// sleeps while no class is low (a tier that gives no classes never pays for
// it) and, once one is found low, wakes holding exactly what its twin (the
// same ranking without classes) holds, with its hits, and from then on
// takes every touch. Driven with and without classes, it must behave as if
// it had been awake throughout: a copy run with the class candidate's twin
// check disabled (always awake) keeps the same keys in that lane.
func TestAdaptiveDormantClassShadow(t *testing.T) {
	const capacity = 64
	p := mustNew(t, Adaptive, capacity).(*adaptive)
	cls := -1
	for s := range p.shadows {
		if p.shadows[s].class {
			cls = s
		}
	}
	if cls < 0 || !p.shadows[cls].dormant || p.shadows[cls].twin < 0 {
		t.Fatalf("the default config has no dormant class shadow with a twin")
	}
	// Awake throughout: the same policy with the class shadow woken at once.
	q := mustNew(t, Adaptive, capacity).(*adaptive)
	q.wake(&q.shadows[cls])
	rng := rand.New(rand.NewPCG(5, 6))
	fresh := Key(1 << 20)
	for step := range 40 * minPeriod {
		var k Key
		h := Hint{Class: 1}
		if rng.IntN(3) == 0 {
			fresh++ // class 2: new keys never seen again
			k, h.Class = fresh, 2
		} else {
			k = Key(rng.IntN(4 * capacity))
		}
		for _, x := range []*adaptive{p, q} {
			if x.Contains(k) {
				x.AccessHint(k, h)
			} else {
				x.AddHint(k, h)
			}
			for x.Len() > capacity {
				x.Evict(nil)
			}
		}
		if p.shadows[cls].dormant {
			if p.low[2] {
				t.Fatalf("step %d: class 2 is low and the class shadow still sleeps", step)
			}
			continue
		}
		a, b := p.shadows[cls], q.shadows[cls]
		if a.hits != b.hits || len(a.heap) != len(b.heap) {
			t.Fatalf("step %d: woken shadow: %v hits, %d keys; awake throughout: %v hits, %d keys", step, a.hits, len(a.heap), b.hits, len(b.heap))
		}
		for _, i := range a.heap {
			if q.entries[q.index[p.entries[i].key]].pos[b.slot] < 0 {
				t.Fatalf("step %d: the woken shadow holds key %d, the one awake throughout does not", step, p.entries[i].key)
			}
		}
	}
	if p.shadows[cls].dormant {
		t.Fatal("class 2 was never found low: the shadow never woke")
	}
	checkAdaptive(t, p)
}
