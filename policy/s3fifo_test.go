package policy

import (
	"errors"
	"math"
	"slices"
	"testing"
)

// queueKeys returns the keys of one S3-FIFO queue, oldest first.
func queueKeys(t *testing.T, p Policy, tag uint8) []Key {
	t.Helper()
	s := p.(*s3fifo)
	q := map[uint8]*queue{onSmall: &s.small, onMain: &s.main, onGhost: &s.ghost}[tag]
	keys, err := checkQueue(&s.arena, q, tag)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func evictOne(t *testing.T, p Policy, want Key) {
	t.Helper()
	k, ok := p.Evict(nil)
	if !ok || k != want {
		t.Fatalf("Evict = %d, %v; want %d", k, ok, want)
	}
	checkPolicy(t, p)
}

func TestS3FIFOVictimOrder(t *testing.T) {
	p := mustNew(t, S3FIFO, 20) // small share 2, ghost 20
	for k := Key(1); k <= 6; k++ {
		p.Add(k)
	}
	p.Access(2)
	p.Access(2)
	p.Add(2) // re-add counts as an access
	p.Access(2)
	p.Access(5)

	evictOne(t, p, 1) // small: 1 was never hit
	evictOne(t, p, 3) // small: 2 (hit) moves to main, 3 is evicted
	evictOne(t, p, 4)
	evictOne(t, p, 6) // 5 (hit) moves to main
	if got := queueKeys(t, p, onMain); !slices.Equal(got, []Key{2, 5}) {
		t.Fatalf("main = %v, want [2 5]", got)
	}
	if got := queueKeys(t, p, onGhost); !slices.Equal(got, []Key{1, 3, 4, 6}) {
		t.Fatalf("ghost = %v, want [1 3 4 6]", got)
	}
	if p.Contains(3) {
		t.Fatal("ghost key 3 reported resident")
	}

	p.Add(3) // remembered in ghost: straight to main
	p.Add(7) // new: small
	if got := queueKeys(t, p, onMain); !slices.Equal(got, []Key{2, 5, 3}) {
		t.Fatalf("main = %v, want [2 5 3]", got)
	}
	if got := queueKeys(t, p, onSmall); !slices.Equal(got, []Key{7}) {
		t.Fatalf("small = %v, want [7]", got)
	}
	p.Access(5)
	p.Access(3)
	p.Access(3)

	// small is under its share, so main is evicted first.
	evictOne(t, p, 2) // freq was reset on promotion
	evictOne(t, p, 5) // 5 and 3 get a second round, then 5 has freq 0
	evictOne(t, p, 3)
	evictOne(t, p, 7) // main empty: small
	if k, ok := p.Evict(nil); ok {
		t.Fatalf("Evict on empty = %d, true", k)
	}
}

func TestS3FIFOFrequencyCap(t *testing.T) {
	p := mustNew(t, S3FIFO, 10) // small share 1
	p.Add(1)
	for range 10 {
		p.Access(1)
	}
	p.Add(2)
	evictOne(t, p, 2) // 1 promoted to main with freq 0
	for range 10 {
		p.Access(1)
	}
	if f := p.(*s3fifo).nodes[p.(*s3fifo).index[1]].freq; f != maxFreq {
		t.Fatalf("freq = %d, want cap %d", f, maxFreq)
	}
}

func TestS3FIFOGhostIsBounded(t *testing.T) {
	const capacity = 16
	p := mustNew(t, S3FIFO, capacity)
	for k := Key(0); k < 1000; k++ {
		p.Add(k)
		if p.Len() > capacity {
			p.Evict(nil)
		}
	}
	s := p.(*s3fifo)
	checkPolicy(t, p)
	if want := int(DefaultS3FIFOConfig().GhostRatio * capacity); s.ghost.n != want {
		t.Fatalf("ghost holds %d, want %d", s.ghost.n, want)
	}
	if len(s.nodes) > 2*capacity+1 {
		t.Fatalf("arena grew to %d nodes", len(s.nodes))
	}
	// The oldest ghosts were forgotten: re-adding one goes to small.
	p.Add(0)
	if got := queueKeys(t, p, onSmall); got[len(got)-1] != 0 {
		t.Fatalf("forgotten ghost key not in small: %v", got)
	}
	// A recent ghost goes to main.
	ghosts := queueKeys(t, p, onGhost)
	recent := ghosts[len(ghosts)-1]
	p.Add(recent)
	if got := queueKeys(t, p, onMain); got[len(got)-1] != recent {
		t.Fatalf("ghost key %d not in main: %v", recent, got)
	}
}

// A tier that only ever sees a scan of one-hit keys after its hot set was
// hit keeps the hot set under S3-FIFO and loses it under LRU.
func TestS3FIFOFiltersOneHitWonders(t *testing.T) {
	const capacity, hot = 100, 50
	resident := func(kind Kind) int {
		p := mustNew(t, kind, capacity)
		touch := func(k Key) {
			if p.Contains(k) {
				p.Access(k)
				return
			}
			if p.Len() == capacity {
				if _, ok := p.Evict(nil); !ok {
					t.Fatal("Evict failed on a full policy")
				}
			}
			p.Add(k)
		}
		for range 3 {
			for k := Key(0); k < hot; k++ {
				touch(k)
			}
		}
		for k := Key(1000); k < 3000; k++ {
			touch(k)
		}
		checkPolicy(t, p)
		n := 0
		for k := Key(0); k < hot; k++ {
			if p.Contains(k) {
				n++
			}
		}
		return n
	}
	if got := resident(S3FIFO); got != hot {
		t.Errorf("S3-FIFO kept %d of %d hot keys through a scan", got, hot)
	}
	if got := resident(LRU); got != 0 {
		t.Errorf("LRU kept %d hot keys through a scan of 2000", got)
	}
}

func TestS3FIFOEvictableFilter(t *testing.T) {
	p := mustNew(t, S3FIFO, 10) // small share 1
	for k := Key(1); k <= 4; k++ {
		p.Add(k)
		p.Access(k)
	}
	// Everything hit: the first Evict promotes all of small to main.
	pinned := map[Key]bool{1: true, 3: true}
	unpinned := func(k Key) bool { return !pinned[k] }
	evictable := func(k Key) bool {
		if pinned[k] && !p.Contains(k) {
			t.Fatalf("filter asked about non-resident %d", k)
		}
		return unpinned(k)
	}
	if got, want := drain(t, p, evictable), []Key{2, 4}; !slices.Equal(got, want) {
		t.Fatalf("victims = %v, want %v", got, want)
	}
	if got := queueKeys(t, p, onMain); !slices.Equal(got, []Key{1, 3}) {
		t.Fatalf("pinned keys moved: main = %v", got)
	}
	if k, ok := p.Evict(func(Key) bool { return false }); ok {
		t.Fatalf("Evict(none) = %d, true", k)
	}
	if got, want := drain(t, p, nil), []Key{1, 3}; !slices.Equal(got, want) {
		t.Fatalf("victims = %v, want %v", got, want)
	}
}

// Evict tries the queue S3-FIFO prefers and falls back to the other one when
// everything there is pinned, including keys small just promoted to main.
func TestS3FIFOFallsBackBetweenQueues(t *testing.T) {
	p := mustNew(t, S3FIFO, 30) // small share 3
	for k := Key(1); k <= 4; k++ {
		p.Add(k)
	}
	evictOne(t, p, 1)
	p.Add(1) // remembered: main = [1]
	evictOne(t, p, 2)
	// small = [3 4] is under its share, so main is preferred.
	not1 := func(k Key) bool { return k != 1 }
	if k, ok := p.Evict(not1); !ok || k != 3 {
		t.Fatalf("main pinned: Evict = %d, %v; want 3 from small", k, ok)
	}
	// small = [4] was hit: it is promoted, then found on main.
	p.Access(4)
	only4 := func(k Key) bool { return k == 4 }
	if k, ok := p.Evict(only4); !ok || k != 4 {
		t.Fatalf("promoted key: Evict = %d, %v; want 4", k, ok)
	}
	// small = [5 6 7] is at its share, so small is preferred.
	for k := Key(5); k <= 7; k++ {
		p.Add(k)
	}
	only1 := func(k Key) bool { return k == 1 }
	if k, ok := p.Evict(only1); !ok || k != 1 {
		t.Fatalf("small pinned: Evict = %d, %v; want 1 from main", k, ok)
	}
	if got := queueKeys(t, p, onSmall); !slices.Equal(got, []Key{5, 6, 7}) {
		t.Fatalf("pinned small keys moved: %v", got)
	}
}

// TestS3FIFOConfig: the defaults are the published numbers, bad numbers are
// errors, and the numbers are what the policy runs with.
func TestS3FIFOConfig(t *testing.T) {
	if d := DefaultS3FIFOConfig(); d != (S3FIFOConfig{SmallRatio: 0.10, GhostRatio: 0.90, MoveToMain: 1}) {
		t.Fatalf("defaults %+v", d)
	}
	for _, c := range []S3FIFOConfig{{0, 0.9, 1}, {1, 0.9, 1}, {0.1, 0, 1}, {0.1, 0.9, 0}, {0.1, 0.9, 4}} {
		if _, err := NewS3FIFO(100, c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: %v, want ErrBadConfig", c, err)
		}
	}
	if _, err := NewS3FIFO(0, DefaultS3FIFOConfig()); !errors.Is(err, ErrBadCapacity) {
		t.Errorf("capacity 0: %v", err)
	}
	p, err := NewS3FIFO(100, S3FIFOConfig{SmallRatio: 0.3, GhostRatio: 0.5, MoveToMain: 2})
	if err != nil {
		t.Fatal(err)
	}
	s := p.(*s3fifo)
	if s.smallCap != 30 || s.ghostCap != 50 || s.promote != 2 {
		t.Fatalf("small %d ghost %d promote %d", s.smallCap, s.ghostCap, s.promote)
	}
	// With MoveToMain 2, a key hit once on small is evicted, not promoted.
	for k := range Key(100) {
		p.Add(k)
	}
	p.Access(0)
	if v, ok := p.Evict(nil); !ok || v != 0 {
		t.Fatalf("evicted %d, want key 0 (hit once, below MoveToMain 2)", v)
	}
}

// TestS3FIFOHugeGhostRatio: a ghost ratio whose ghost queue cannot be
// indexed (infinite, or more keys than the arena's int32 node indices
// reach) is ErrBadConfig. It was accepted: int(+Inf × capacity) is
// MinInt64 on amd64, so the ghost queue silently held one key, and
// MaxInt64 on arm64, where sizing the arena then panicked.
func TestS3FIFOHugeGhostRatio(t *testing.T) {
	for _, r := range []float64{math.Inf(1), 1e300, math.MaxInt32} {
		if _, err := NewS3FIFO(100, S3FIFOConfig{SmallRatio: 0.1, GhostRatio: r, MoveToMain: 1}); !errors.Is(err, ErrBadConfig) {
			t.Errorf("GhostRatio %g: %v, want ErrBadConfig", r, err)
		}
	}
	if _, err := NewS3FIFO(100, S3FIFOConfig{SmallRatio: 0.1, GhostRatio: 1000, MoveToMain: 1}); err != nil {
		t.Errorf("GhostRatio 1000: %v", err)
	}
}
