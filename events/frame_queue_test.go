package events

import (
	"math/rand/v2"
	"testing"
)

// TestFrameQueueGrowsOnDemand: a subscriber's queue starts small whatever
// SubscriberQueue is, grows as batches wait, and still drops, counted in
// SubscriberDrops, exactly the batches past SubscriberQueue (it used to
// allocate all SubscriberQueue frames when the subscriber joined).
func TestFrameQueueGrowsOnDemand(t *testing.T) {
	if _, c := newFrameQueue(10000).len(); c > frameQueueStart {
		t.Fatalf("a fresh queue of 10000 holds a ring of %d frames, want at most %d", c, frameQueueStart)
	}
	const max = 100 // not a power of two: the last doubling stops at max
	s := &Server{}
	pc := &pubConn{out: newFrameQueue(max)}
	for i := range 150 {
		s.offer(pc, Frame{Seq: uint64(i)})
		if n, c := pc.out.len(); n != min(i+1, max) || c < n || c > max {
			t.Fatalf("after %d offers: %d queued in a ring of %d, want %d in at most %d", i+1, n, c, min(i+1, max), max)
		}
	}
	if d := s.SubscriberDrops(); d != 50 {
		t.Fatalf("150 batches for a queue of %d: %d dropped, want 50", max, d)
	}
	pc.out.close()
	for i := range max {
		if f, ok, _ := pc.out.pop(); !ok || f.Seq != uint64(i) {
			t.Fatalf("pop %d: seq %d (%v), want %d", i, f.Seq, ok, i)
		}
	}
	if _, ok, closed := pc.out.pop(); ok || !closed {
		t.Fatalf("a closed, emptied queue: ok %v closed %v, want no frame and closed", ok, closed)
	}
}

// TestFrameQueueModel drives a queue and a plain slice with the same random
// pushes and pops (the ring wrapping while it grows) and compares them.
func TestFrameQueueModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, max := range []int{1, 3, 16, 17, 100} {
		q := newFrameQueue(max)
		var model []uint64
		next := uint64(0)
		for op := range 5000 {
			if rng.IntN(3) < 2 { // push more often than pop, so it fills
				ok := q.push(Frame{Seq: next})
				if want := len(model) < max; ok != want {
					t.Fatalf("max %d, op %d: push %v, want %v", max, op, ok, want)
				}
				if ok {
					model = append(model, next)
				}
				next++
				continue
			}
			f, ok, _ := q.pop()
			if ok != (len(model) > 0) || (ok && f.Seq != model[0]) {
				t.Fatalf("max %d, op %d: pop %d %v, want %v", max, op, f.Seq, ok, model)
			}
			if ok {
				model = model[1:]
			}
		}
	}
}

// BenchmarkSubscriberQueue: one batch offered and taken, as send and a
// writer that keeps up do, on the ring and on the buffered channel it
// replaced.
func BenchmarkSubscriberQueue(b *testing.B) {
	const queue = 10000
	b.Run("kind=ring", func(b *testing.B) {
		b.ReportAllocs()
		q := newFrameQueue(queue)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				if _, ok, closed := q.pop(); !ok {
					if closed {
						return
					}
					<-q.ready
				}
			}
		}()
		for i := 0; b.Loop(); i++ {
			for !q.push(Frame{Seq: uint64(i)}) {
			}
		}
		q.close()
		<-done
	})
	b.Run("kind=chan", func(b *testing.B) {
		b.ReportAllocs()
		ch := make(chan Frame, queue)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range ch {
			}
		}()
		for i := 0; b.Loop(); i++ {
			ch <- Frame{Seq: uint64(i)}
		}
		close(ch)
		<-done
	})
}
