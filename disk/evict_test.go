package disk

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"github.com/kvtier/kvtier/policy"
)

func TestEvictionFollowsPolicy(t *testing.T) {
	for _, tc := range []struct {
		kind   policy.Kind
		victim uint64
	}{
		{policy.LRU, 2},  // 1 was read, so 2 is least recent
		{policy.FIFO, 1}, // reads do not count
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			cfg := testConfig(t, 4)
			cfg.Policy = tc.kind
			s, _ := mustOpen(t, cfg)
			defer mustClose(t, s)
			for h := uint64(1); h <= 4; h++ {
				mustWrite(t, s, h)
			}
			mustReadExact(t, s, 1)
			v, ev := mustWrite(t, s, 5)
			if !ev || v != metaFor(tc.victim) {
				t.Fatalf("victim %+v (evicted %t), want %d", v, ev, tc.victim)
			}
			if s.Contains(tc.victim) || s.Stats().Evictions != 1 {
				t.Fatalf("victim still present or not counted: %+v", s.Stats())
			}
			checkInv(t, s)
		})
	}
}

func TestReadPinsPreventEviction(t *testing.T) {
	s, _ := mustOpen(t, testConfig(t, 3))
	defer mustClose(t, s)
	for h := uint64(1); h <= 3; h++ {
		mustWrite(t, s, h)
	}
	// Pin 1 and 2: the next write must evict 3 although 1 is LRU.
	op1, _, _ := s.PlanRead(1, digestFor(1))
	op2, _, _ := s.PlanRead(2, digestFor(2))
	mustRead := func(op *ReadOp) {
		t.Helper()
		dst := AlignedBuffer(testPayload)
		err := op.Execute(dst)
		s.CompleteRead(op, err)
		if err != nil || !bytes.Equal(dst[:op.Len()], payloadFor(op.Hash(), testPayload)) {
			t.Fatalf("pinned read of %d: %v", op.Hash(), err)
		}
	}
	if v, _ := mustWrite(t, s, 4); v.Hash != 3 {
		t.Fatalf("evicted %d, want 3 (1 and 2 pinned)", v.Hash)
	}
	// Pin 4 too: nothing is evictable.
	op4, _, _ := s.PlanRead(4, digestFor(4))
	if _, _, err := s.WriteSync(metaFor(5), payloadFor(5, testPayload)); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("write with every slot pinned: %v", err)
	}
	if st := s.Stats(); st.Pinned != 3 {
		t.Fatalf("pinned %d, want 3", st.Pinned)
	}
	checkInv(t, s)
	// Removing a pinned block unpublishes it but keeps its slot until the
	// read and the scrub complete.
	rop, err := s.PlanRemove(2)
	if err != nil || s.Contains(2) || s.Stats().Doomed != 1 || s.Stats().Removing != 1 {
		t.Fatalf("Remove of pinned block: %v %+v", err, s.Stats())
	}
	if !op2.Removed() {
		t.Fatal("the read in flight does not know its block was removed")
	}
	if _, _, err := s.WriteSync(metaFor(5), payloadFor(5, testPayload)); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("write reused a doomed slot: %v", err)
	}
	if op, _, _ := s.PlanRead(2, digestFor(2)); op != nil {
		t.Fatal("PlanRead of a removed block joined the read in flight")
	}
	mustRead(op1)
	mustRead(op2)
	mustRead(op4)
	if st := s.Stats(); st.Pinned != 0 || st.Doomed != 1 || st.Free != 0 {
		t.Fatalf("after unpinning, before the scrub: %+v", st)
	}
	checkInv(t, s)
	s.CompleteRemove(rop, rop.Execute())
	if st := s.Stats(); st.Pinned != 0 || st.Doomed != 0 || st.Removing != 0 || st.Free != 1 {
		t.Fatalf("after unpinning and the scrub: %+v", st)
	}
	mustWrite(t, s, 5)
	checkInv(t, s)
}

func TestWritesInFlightAreNotEvicted(t *testing.T) {
	s, _ := mustOpen(t, testConfig(t, 2))
	defer mustClose(t, s)
	a, err := s.PlanWrite(metaFor(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PlanWrite(metaFor(1)); !errors.Is(err, ErrExists) {
		t.Fatalf("second plan of a hash being written: %v", err)
	}
	b, err := s.PlanWrite(metaFor(2))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PlanWrite(metaFor(3)); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("plan with every slot being written: %v", err)
	}
	if s.Contains(1) {
		t.Fatal("block visible before CompleteWrite")
	}
	s.CompleteWrite(a, a.Execute(payloadFor(1, testPayload)))
	s.CompleteWrite(b, errors.New("caller gave up")) // never executed
	checkInv(t, s)
	mustReadExact(t, s, 1)
	if s.Contains(2) || s.Stats().WriteErrors.Other != 1 {
		t.Fatalf("abandoned write published: %+v", s.Stats())
	}
}

func TestCoalescedReadsDoOneIO(t *testing.T) {
	cfg, ffs := faultConfig(t, 4, false)
	s, _ := mustOpen(t, cfg)
	defer mustClose(t, s)
	mustWrite(t, s, 1)
	before := ffs.Counts().Reads
	op, first, _ := s.PlanRead(1, digestFor(1))
	if !first || op.Waiters() != 1 {
		t.Fatalf("first PlanRead: first=%t waiters=%d", first, op.Waiters())
	}
	for range 3 {
		again, first, _ := s.PlanRead(1, digestFor(1))
		if again != op || first {
			t.Fatal("PlanRead of an in-flight hash did not coalesce")
		}
	}
	if op.Waiters() != 4 {
		t.Fatalf("waiters %d, want 4", op.Waiters())
	}
	dst := AlignedBuffer(testPayload)
	err := op.Execute(dst)
	s.CompleteRead(op, err)
	if err != nil || !bytes.Equal(dst[:op.Len()], payloadFor(1, testPayload)) {
		t.Fatalf("coalesced read: %v", err)
	}
	if n := ffs.Counts().Reads - before; n != 1 { // header + payload in one preadv
		t.Fatalf("%d file reads for 4 coalesced readers, want 1", n)
	}
	if st := s.Stats(); st.Reads != 1 || st.ReadWaiters != 3 || st.Pinned != 0 {
		t.Fatalf("stats %+v", st)
	}
	if op2, first, _ := s.PlanRead(1, digestFor(1)); op2 == op || !first {
		t.Fatal("a completed op was reused")
	} else {
		s.CompleteRead(op2, op2.Execute(dst))
	}
	checkInv(t, s)
}

// TestConcurrentExecute runs Execute on worker goroutines while the owner
// plans and completes, as the actor will; the race detector checks that
// ops share nothing with the Store.
func TestConcurrentExecute(t *testing.T) {
	s, _ := mustOpen(t, testConfig(t, 32))
	defer mustClose(t, s)
	type done struct {
		w   *WriteOp
		r   *ReadOp
		dst []byte
		err error
	}
	results := make(chan done)
	var wg sync.WaitGroup
	inFlight := 0
	for round := range 4 {
		for i := range 16 {
			h := uint64(round*16 + i + 1)
			if op, err := s.PlanWrite(metaFor(h)); err == nil {
				inFlight++
				wg.Go(func() { results <- done{w: op, err: op.Execute(payloadFor(h, testPayload))} })
			} else if !errors.Is(err, ErrNoSpace) {
				t.Fatal(err)
			}
			if h > 8 {
				if op, first, _ := s.PlanRead(h-8, digestFor(h-8)); op != nil && first {
					inFlight++
					dst := AlignedBuffer(testPayload)
					wg.Go(func() { results <- done{r: op, dst: dst, err: op.Execute(dst)} })
				}
			}
		}
		for ; inFlight > 0; inFlight-- {
			d := <-results
			if d.w != nil {
				s.CompleteWrite(d.w, d.err)
			} else {
				s.CompleteRead(d.r, d.err)
				if d.err == nil && !bytes.Equal(d.dst[:d.r.Len()], payloadFor(d.r.Hash(), testPayload)) {
					t.Fatalf("read %d returned wrong bytes", d.r.Hash())
				}
			}
			if d.err != nil {
				t.Fatalf("execute: %v", d.err)
			}
		}
		checkInv(t, s)
	}
	wg.Wait()
}
