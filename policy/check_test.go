package policy

import (
	"fmt"
	"testing"
)

// checkQueue walks q forwards and backwards and returns its keys in order,
// or an error if the links, the count or the queue tags disagree.
func checkQueue(a *arena, q *queue, tag uint8) ([]Key, error) {
	var keys []Key
	prev := nilNode
	for i := q.head; i != nilNode; i = a.nodes[i].next {
		n := a.nodes[i]
		if n.prev != prev {
			return nil, fmt.Errorf("node %d: prev %d, want %d", i, n.prev, prev)
		}
		if tag != 0 && n.queue != tag {
			return nil, fmt.Errorf("node %d: queue %d, want %d", i, n.queue, tag)
		}
		if n.freq > maxFreq {
			return nil, fmt.Errorf("node %d: freq %d over cap", i, n.freq)
		}
		keys = append(keys, n.key)
		prev = i
		if len(keys) > len(a.nodes) {
			return nil, fmt.Errorf("queue has a cycle")
		}
	}
	if q.tail != prev {
		return nil, fmt.Errorf("tail %d, want %d", q.tail, prev)
	}
	if q.n != len(keys) {
		return nil, fmt.Errorf("count %d, walked %d", q.n, len(keys))
	}
	return keys, nil
}

func freeCount(a *arena) int {
	n := 0
	for i := a.free; i != nilNode; i = a.nodes[i].next {
		n++
	}
	return n
}

// checkPolicy verifies the internal structure of p: queue links, index
// agreement and node accounting. It returns the resident keys in eviction
// order of their queues (small then main for S3-FIFO, T1 then T2 for ARC).
func checkPolicy(t *testing.T, p Policy) []Key {
	t.Helper()
	var (
		a      *arena
		index  map[Key]int32
		queues []*queue
		tags   []uint8
		ghosts []bool // per queue; nil: only S3-FIFO's onGhost queue is a ghost
	)
	switch p := p.(type) {
	case *lru:
		a, index, queues, tags = &p.arena, p.index, []*queue{&p.q}, []uint8{0}
	case *fifo:
		a, index, queues, tags = &p.arena, p.index, []*queue{&p.q}, []uint8{0}
	case *s3fifo:
		a, index = &p.arena, p.index
		queues, tags = []*queue{&p.small, &p.main, &p.ghost}, []uint8{onSmall, onMain, onGhost}
		if p.ghost.n > p.ghostCap {
			t.Fatalf("ghost holds %d keys, cap %d", p.ghost.n, p.ghostCap)
		}
	case *arc:
		a, index = &p.arena, p.index
		queues, tags = []*queue{&p.t1, &p.t2, &p.b1, &p.b2}, []uint8{onT1, onT2, onB1, onB2}
		ghosts = []bool{false, false, true, true}
		if p.b1.n > p.ghostCap || p.b2.n > p.ghostCap {
			t.Fatalf("ghosts hold %d and %d keys, cap %d", p.b1.n, p.b2.n, p.ghostCap)
		}
		if p.target < 0 || p.target > p.capacity {
			t.Fatalf("target %d outside 0..%d", p.target, p.capacity)
		}
	case *adaptive:
		checkAdaptive(t, p)
		return nil
	default:
		t.Fatalf("unknown policy type %T", p)
	}
	var resident []Key
	total := 0
	for qi, q := range queues {
		keys, err := checkQueue(a, q, tags[qi])
		if err != nil {
			t.Fatalf("%v queue %d: %v", p.Kind(), qi, err)
		}
		for _, k := range keys {
			i, ok := index[k]
			if !ok || a.nodes[i].key != k {
				t.Fatalf("%v: key %d on queue %d but index says %d, %v", p.Kind(), k, qi, i, ok)
			}
		}
		ghost := tags[qi] == onGhost
		if ghosts != nil {
			ghost = ghosts[qi]
		}
		if !ghost {
			resident = append(resident, keys...)
		}
		total += len(keys)
	}
	if len(index) != total {
		t.Fatalf("%v: index has %d keys, queues %d", p.Kind(), len(index), total)
	}
	if got := freeCount(a); got+total != len(a.nodes) {
		t.Fatalf("%v: %d free + %d linked != %d nodes", p.Kind(), got, total, len(a.nodes))
	}
	if p.Len() != len(resident) {
		t.Fatalf("%v: Len %d, queues hold %d resident", p.Kind(), p.Len(), len(resident))
	}
	return resident
}

func mustNew(t testing.TB, kind Kind, capacity int) Policy {
	t.Helper()
	p, err := New(kind, capacity)
	if err != nil {
		t.Fatalf("New(%v, %d): %v", kind, capacity, err)
	}
	return p
}

// drain evicts until the policy reports none and returns the victims.
func drain(t *testing.T, p Policy, evictable func(Key) bool) []Key {
	t.Helper()
	var got []Key
	for {
		k, ok := p.Evict(evictable)
		if !ok {
			return got
		}
		got = append(got, k)
		checkPolicy(t, p)
		if len(got) > 1<<20 {
			t.Fatal("Evict never reports empty")
		}
	}
}
