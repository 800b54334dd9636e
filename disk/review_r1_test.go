package disk

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestWriteOverUnreadHeaderEndsStaleUnknown (review probe of 6df38d7): a
// header Open could neither read nor zero makes every removal not durable
// "until Close or a write scrubs it". A write that lands in that very
// slot overwrites the header; from then on nothing unknown is left, so
// StaleHolds is false for a hash no slot holds and the store's books agree
// with its slots. PlanWrite dropped the slot's staleUnknown mark without
// the Store's count, so the count stayed 1 for ever (every later removal
// reported not durable) and CheckInvariants failed.
func TestWriteOverUnreadHeaderEndsStaleUnknown(t *testing.T) {
	cfg, ffs, off := headerAtOpen(t)
	at := headerBlock(off)
	ffs.Inject(Fault{Op: FaultRead, Err: unix.EIO, Times: 1, Match: at})
	ffs.Inject(Fault{Op: FaultWrite, Err: unix.EIO, Times: 1, Match: at})
	s, rep := mustOpen(t, cfg)
	defer mustClose(t, s)
	if rep.Dropped[DropIOError] != 1 || !s.StaleHolds(42) {
		t.Fatalf("open with slot 1 unreadable: %+v, StaleHolds(42) %t", rep, s.StaleHolds(42))
	}
	// Write until one lands in slot 1, over the unread header.
	for h := uint64(7); ; h++ {
		mustWrite(t, s, h)
		if _, o, _ := s.slotLocation(h); o == off {
			break
		}
		if h > 9 {
			t.Fatal("no write landed in slot 1")
		}
	}
	if err := s.CheckInvariants(); err != nil || s.StaleHolds(42) {
		t.Fatalf("after a write landed over the unread header: invariants %v, StaleHolds(42) %t (want nil, false)", err, s.StaleHolds(42))
	}
}

// TestFailedWriteOverUnreadHeaderKeepsStaleUnknown (review probe of
// 6df38d7): a write into the slot whose header Open could neither read
// nor zero fails, and so does zeroing it: the header is still unknown, so
// every removal stays not durable, and the slot still says so (the
// Store's count and the slots agree, and Close's scrub ends it).
func TestFailedWriteOverUnreadHeaderKeepsStaleUnknown(t *testing.T) {
	cfg, ffs, off := headerAtOpen(t)
	at := headerBlock(off)
	ffs.Inject(Fault{Op: FaultRead, Err: unix.EIO, Times: 1, Match: at})
	ffs.Inject(Fault{Op: FaultWrite, Err: unix.EIO, Times: 1, Match: at})
	s, _ := mustOpen(t, cfg)
	mustWrite(t, s, 7) // slot 0
	// The next write goes to slot 1: its payload write and the scrub fail.
	inSlot := func(_ string, o int64, n int) bool { return o >= off && o <= off+BlockSize }
	ffs.Inject(Fault{Op: FaultWrite, Err: unix.EIO, Times: 2, Match: inSlot})
	if _, _, err := s.WriteSync(metaFor(8), payloadFor(8, testPayload)); err == nil {
		t.Fatal("write into slot 1 with its I/O failing: no error")
	}
	if err := s.CheckInvariants(); err != nil || !s.StaleHolds(42) {
		t.Fatalf("after a failed, unscrubbed write over the unread header: invariants %v, StaleHolds(42) %t (want nil, true)", err, s.StaleHolds(42))
	}
	mustClose(t, s) // scrubs slot 1
	s, _ = mustOpen(t, cfg)
	defer mustClose(t, s)
	if s.StaleHolds(42) {
		t.Fatal("after Close scrubbed the header: still stale")
	}
}
