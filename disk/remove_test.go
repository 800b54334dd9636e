package disk

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// A removal is on disk when RemoveSync returns: a crash right after it
// (no Close, no scrub of stale slots) does not bring the block back.
func TestRemoveDurableAcrossCrash(t *testing.T) {
	for _, sync := range []bool{false, true} {
		cfg := testConfig(t, 8)
		cfg.Sync = sync
		cfg.Files = 2
		s, _ := mustOpen(t, cfg)
		for h := uint64(1); h <= 5; h++ {
			mustWrite(t, s, h)
		}
		for _, h := range []uint64{2, 3} {
			if err := s.RemoveSync(h); err != nil {
				t.Fatalf("RemoveSync(%d): %v", h, err)
			}
		}
		if st := s.Stats(); st.Removes != 2 || st.Live != 3 || st.Free != 5 || st.RemoveErrors.Total() != 0 {
			t.Fatalf("stats %+v", st)
		}
		s.crash()
		s, rep := mustOpen(t, cfg)
		if rep.Records != 3 || s.Contains(2) || s.Contains(3) {
			t.Fatalf("sync=%t: removed blocks back after a crash: %+v", sync, rep)
		}
		for _, h := range []uint64{1, 4, 5} {
			mustReadExact(t, s, h)
		}
		checkInv(t, s)
		mustClose(t, s)
	}
}

// The slot of a block being removed is not reused before its header is
// zeroed, and Close waits for the removal.
func TestRemoveHoldsSlotUntilScrubbed(t *testing.T) {
	s, _ := mustOpen(t, testConfig(t, 2))
	mustWrite(t, s, 1)
	mustWrite(t, s, 2)
	op, err := s.PlanRemove(1)
	if err != nil {
		t.Fatal(err)
	}
	if op.Meta() != metaFor(1) || s.Contains(1) {
		t.Fatalf("PlanRemove: meta %+v, still contained %t", op.Meta(), s.Contains(1))
	}
	if _, _, err := s.ReadSyncDigest(1, digestFor(1), AlignedBuffer(testPayload)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read of a block being removed: %v", err)
	}
	// The only other slot is evicted instead of the one being scrubbed.
	v, ev, err := s.WriteSync(metaFor(3), payloadFor(3, testPayload))
	if err != nil || !ev || v.Hash != 2 {
		t.Fatalf("write during a removal: victim %+v %t, %v", v, ev, err)
	}
	if _, _, err := s.WriteSync(metaFor(4), payloadFor(4, testPayload)); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Removing != 1 || st.Doomed != 1 || st.Live != 1 {
		t.Fatalf("stats %+v", st)
	}
	wantErr(t, s.Close(), ErrBusy)
	checkInv(t, s)
	s.CompleteRemove(op, op.Execute())
	if st := s.Stats(); st.Removing != 0 || st.Doomed != 0 || st.Free != 1 {
		t.Fatalf("stats %+v", st)
	}
	checkInv(t, s)
	mustClose(t, s)
}

// A scrub that fails leaves the block removed in memory, is reported and
// counted, and Close scrubs the header again.
func TestRemoveScrubFailure(t *testing.T) {
	cfg, ffs := faultConfig(t, 4, false)
	s, _ := mustOpen(t, cfg)
	mustWrite(t, s, 1)
	mustWrite(t, s, 2)
	ffs.Inject(Fault{Op: FaultWrite, Err: unix.EIO, Match: headerWrites(SlotBytes(testPayload)), Times: 1})
	err := s.RemoveSync(1)
	wantErr(t, err, unix.EIO)
	if s.Contains(1) || s.Stats().RemoveErrors.EIO != 1 {
		t.Fatalf("after a failed scrub: contained %t, stats %+v", s.Contains(1), s.Stats())
	}
	// A removal completed without Execute is reported as not durable.
	op, err := s.PlanRemove(2)
	if err != nil {
		t.Fatal(err)
	}
	s.CompleteRemove(op, nil)
	if st := s.Stats(); st.RemoveErrors.Other != 1 || st.Free != 4 {
		t.Fatalf("stats %+v", st)
	}
	checkInv(t, s)
	mustClose(t, s) // scrubs both headers
	s, rep := mustOpen(t, cfg)
	defer mustClose(t, s)
	if rep.Records != 0 {
		t.Fatalf("removed blocks back after Close: %+v", rep)
	}
}

// A write that fails leaves no whole header behind in its slot: neither its
// own (the bytes landed, the error came after) nor that of the block it
// evicted (it failed before a byte landed). Either would be indexed at the
// next Open, and a later removal of that block from another slot would not
// reach it, so a crash after the removal would bring the block back.
func TestFailedWriteCannotResurrectRemovedBlock(t *testing.T) {
	for _, tc := range []struct {
		name string
		sync bool
		// fault makes the next write fail; own tells whether the failed
		// write's own header is the one at risk (else the victim's).
		fault func() Fault
		own   bool
	}{
		{"pwritev-eio-after-bytes", false, func() Fault {
			return Fault{Op: FaultWrite, Err: unix.EIO, Partial: 1 << 30, Times: 1}
		}, true},
		{"header-sync-fails", true, func() Fault {
			calls := 0
			return Fault{Op: FaultSync, Err: unix.EIO, Times: 1, Match: func(string, int64, int) bool { calls++; return calls == 2 }}
		}, true},
		{"enospc-before-bytes", false, func() Fault {
			return Fault{Op: FaultWrite, Err: unix.ENOSPC, Times: 1}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, ffs := faultConfig(t, 3, true)
			cfg.Sync = tc.sync
			s, _ := mustOpen(t, cfg)
			for h := uint64(1); h <= 3; h++ {
				mustWrite(t, s, h)
			}
			// The failed write: block 9 takes a victim's slot.
			op, err := s.PlanWrite(metaFor(9))
			if err != nil {
				t.Fatal(err)
			}
			v, _ := op.Victim()
			ffs.Inject(tc.fault())
			if err := op.Execute(payloadFor(9, testPayload)); err == nil {
				t.Fatal("faulted write succeeded")
			}
			s.CompleteWrite(op, errors.New("faulted"))
			atRisk := v.Hash
			if tc.own {
				atRisk = 9
			}
			// Free another slot above the failed one, so atRisk is
			// written again elsewhere, then removed.
			other := uint64(1)
			if other == v.Hash {
				other = 2
			}
			if err := s.RemoveSync(other); err != nil {
				t.Fatal(err)
			}
			mustWrite(t, s, atRisk)
			if err := s.RemoveSync(atRisk); err != nil {
				t.Fatal(err)
			}
			checkInv(t, s)
			s.crash()
			s, rep := mustOpen(t, cfg)
			defer mustClose(t, s)
			if s.Contains(atRisk) {
				t.Fatalf("block %d, removed before the crash, is back after Open (report %+v)", atRisk, rep)
			}
		})
	}
}
