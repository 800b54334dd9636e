package disk

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// TestProbeRvFRemoveOfStaleRecordIsDurable: a block dropped from the store
// without its header zeroed leaves a free slot marked stale (its record
// stays until Close, or a write that lands there). RemoveSync of that
// block then answers ErrNotFound, which its doc calls durable ("any other
// error means ... a header of it may come back"), and the disk actor
// answers the Delete with no error; a crash before Close brings the block
// back at Open. c75b51c made a removal wait for, or report, a write in
// flight over an evicted record (Store.Overwriting), but a stale free slot
// is not counted there.
//
//   - read-error: a read fails with a transient EIO; the store drops the
//     block (unpublish without scrub); its header and payload are intact.
//   - write-and-scrub-fail: the write that evicted the block fails, and
//     so does the zeroing of the slot's header (Scrubbed false); the
//     victim's header stays. (victimGone reports ErrNotDurable only to
//     the deletes already waiting; a later one hears nothing.)
func TestProbeRvFRemoveOfStaleRecordIsDurable(t *testing.T) {
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
		err := s.RemoveSync(1)
		if err != nil && !errors.Is(err, ErrNotFound) {
			t.Skipf("RemoveSync reports %v: the removal says it may not be durable", err)
		}
		checkInv(t, s)
		s.crash()
		s, rep := mustOpen(t, cfg)
		defer mustClose(t, s)
		if s.Contains(1) {
			t.Fatalf("RemoveSync(1) answered %v (durable), yet block 1 is back after a crash (report %+v)", err, rep)
		}
	})
	t.Run("write-and-scrub-fail", func(t *testing.T) {
		cfg, ffs := faultConfig(t, 3, true)
		s, _ := mustOpen(t, cfg)
		for h := uint64(1); h <= 3; h++ {
			mustWrite(t, s, h)
		}
		op, err := s.PlanWrite(metaFor(9))
		if err != nil {
			t.Fatal(err)
		}
		v, ok := op.Victim()
		if !ok {
			t.Fatal("no victim")
		}
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
		err = s.RemoveSync(v.Hash)
		if err != nil && !errors.Is(err, ErrNotFound) {
			t.Skipf("RemoveSync reports %v: the removal says it may not be durable", err)
		}
		checkInv(t, s)
		s.crash()
		s, rep := mustOpen(t, cfg)
		defer mustClose(t, s)
		if s.Contains(v.Hash) {
			t.Fatalf("RemoveSync(%d) answered %v (durable), yet the block is back after a crash (report %+v)", v.Hash, err, rep)
		}
	})
}
