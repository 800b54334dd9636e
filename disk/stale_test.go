package disk

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRemoveOfStaleRecordNotDurable: a block dropped from the store without
// its header zeroed leaves a free slot marked stale (its record stays until
// Close, or a write that lands there). A removal of that block says so
// (ErrNotDurable: a crash before Close would bring it back), and once Close
// zeroed the header the block stays gone. (RemoveSync answered ErrNotFound,
// which its doc calls durable, review of 2026-11-27.)
//
//   - read-error: a read fails with a transient EIO; the store drops the
//     block (unpublish without scrub); its header and payload are intact.
//   - write-and-scrub-fail: the write that evicted the block fails, and
//     so does the zeroing of the slot's header (Scrubbed false); the
//     victim's header stays.
func TestRemoveOfStaleRecordNotDurable(t *testing.T) {
	t.Run("read-error", func(t *testing.T) {
		cfg, ffs := faultConfig(t, 3, true)
		s, _ := mustOpen(t, cfg)
		mustWrite(t, s, 1)
		mustWrite(t, s, 2)
		ffs.Inject(Fault{Op: FaultRead, Err: unix.EIO, Times: 1})
		dst := AlignedBuffer(testPayload)
		if _, _, err := s.ReadSyncDigest(1, digestFor(1), dst); err == nil {
			t.Fatal("faulted read succeeded")
		}
		if s.Contains(1) {
			t.Fatal("block 1 still contained after a failed read")
		}
		if err := s.RemoveSync(1); !errors.Is(err, ErrNotDurable) {
			t.Fatalf("RemoveSync(1) of the dropped block: %v, want ErrNotDurable", err)
		}
		checkInv(t, s)
		closeReopenGone(t, s, cfg, 1)
	})
	t.Run("write-and-scrub-fail", func(t *testing.T) {
		cfg, ffs := faultConfig(t, 3, true)
		s, _ := mustOpen(t, cfg)
		op, v := evictingWrite(t, s)
		// The payload write fails before any byte, and so does the
		// zeroing of the header after it.
		ffs.Inject(Fault{Op: FaultWrite, Err: unix.EIO, Times: 2})
		if err := op.Execute(payloadFor(9, testPayload)); err == nil {
			t.Fatal("faulted write succeeded")
		}
		if op.Scrubbed() {
			t.Fatal("the scrub was not faulted")
		}
		s.CompleteWrite(op, errors.New("faulted"))
		if err := s.RemoveSync(v.Hash); !errors.Is(err, ErrNotDurable) {
			t.Fatalf("RemoveSync(%d) of the victim left in the slot: %v, want ErrNotDurable", v.Hash, err)
		}
		checkInv(t, s)
		closeReopenGone(t, s, cfg, v.Hash)
	})
}

// closeReopenGone closes s (which zeroes its stale headers), reopens the
// store and checks that hash is gone and removing it now is plainly
// nothing to do.
func closeReopenGone(t *testing.T, s *Store, cfg Config, hash uint64) {
	t.Helper()
	mustClose(t, s)
	s, rep := mustOpen(t, cfg)
	defer mustClose(t, s)
	if s.Contains(hash) || s.StaleHolds(hash) {
		t.Fatalf("block %d is back after Close and Open (report %+v)", hash, rep)
	}
	if err := s.RemoveSync(hash); !errors.Is(err, ErrNotFound) {
		t.Fatalf("RemoveSync(%d) after the reopen: %v, want ErrNotFound", hash, err)
	}
}
