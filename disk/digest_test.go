package disk

import (
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func TestDigestMismatchIsNeverServed(t *testing.T) {
	s, _ := mustOpen(t, testConfig(t, 4))
	defer mustClose(t, s)
	mustWrite(t, s, 1) // stored with digestFor(1)
	other := digestFor(2)

	dst := AlignedBuffer(testPayload)
	for i := range dst {
		dst[i] = 0xee
	}
	_, _, err := s.ReadSyncDigest(1, other, dst)
	wantErr(t, err, ErrDigestMismatch)
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("mismatch reported as %v", err)
	}
	if dst[0] != 0xee {
		t.Fatal("a refused read touched dst")
	}
	if _, _, err := s.ReadSync(1, dst); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("zero digest against a stored digest: %v", err)
	}
	st := s.Stats()
	if st.VerifyMismatch != 2 || st.Reads != 0 || st.Pinned != 0 || st.ReadErrors.Total() != 0 {
		t.Fatalf("stats %+v", st)
	}
	// The block stays for readers that expect its digest.
	mustReadExact(t, s, 1)

	// A reader with another digest does not join a read in flight.
	op, first, err := s.PlanRead(1, digestFor(1))
	if err != nil || !first {
		t.Fatalf("PlanRead: %v %t", err, first)
	}
	if op2, _, err := s.PlanRead(1, other); op2 != nil || !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("mismatched reader joined the read in flight: %v", err)
	}
	if op.Waiters() != 1 {
		t.Fatalf("waiters %d", op.Waiters())
	}
	s.CompleteRead(op, op.Execute(dst))
	if s.Stats().VerifyMismatch != 3 {
		t.Fatalf("stats %+v", s.Stats())
	}
	checkInv(t, s)
}

func TestZeroDigestMatchesZero(t *testing.T) {
	s, _ := mustOpen(t, testConfig(t, 4))
	defer mustClose(t, s)
	m := metaFor(1)
	m.Digest = [32]byte{}
	if _, _, err := s.WriteSync(m, payloadFor(1, testPayload)); err != nil {
		t.Fatal(err)
	}
	if got, _, err := s.ReadSync(1, AlignedBuffer(testPayload)); err != nil || got != m {
		t.Fatalf("ReadSync: %+v %v", got, err)
	}
	if _, _, err := s.ReadSyncDigest(1, digestFor(1), AlignedBuffer(testPayload)); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("a digest against a block stored without one: %v", err)
	}
}

// rewriteDigest flips the last byte of the digest in the header at off, and
// with resign recomputes the header checksum so only the field check can
// catch it.
func rewriteDigest(t *testing.T, file string, off int64, resign bool) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hdr := make([]byte, headerUsed)
	if _, err := f.ReadAt(hdr, off); err != nil {
		t.Fatal(err)
	}
	hdr[offDigest+31] ^= 0x80
	if resign {
		binary.LittleEndian.PutUint64(hdr[offHeaderSum:], xxhash.Sum64(hdr[:offHeaderSum]))
	}
	if _, err := f.WriteAt(hdr, off); err != nil {
		t.Fatal(err)
	}
}

func TestFlippedDigestOnDiskDetected(t *testing.T) {
	for _, resign := range []bool{false, true} {
		cfg := testConfig(t, 4)
		cfg.NoDirectIO = true // the test rewrites the file behind the store
		s, _ := mustOpen(t, cfg)
		mustWrite(t, s, 1)
		mustWrite(t, s, 2)
		file, off, _ := s.slotLocation(1)
		rewriteDigest(t, file, off, resign)

		// The index still holds the digest the block was written with:
		// the header read back no longer matches it.
		dst := AlignedBuffer(testPayload)
		_, _, err := s.ReadSyncDigest(1, digestFor(1), dst)
		wantErr(t, err, ErrCorrupt)
		var ce *CorruptError
		if !errors.As(err, &ce) {
			t.Fatalf("resign=%t: %v is not a *CorruptError", resign, err)
		}
		st := s.Stats()
		if s.Contains(1) || st.ReadErrors.Corrupt != 1 {
			t.Fatalf("resign=%t: corrupt block still served, stats %+v", resign, st)
		}
		if resign != errors.Is(err, ErrDigestMismatch) || st.VerifyMismatch != map[bool]int64{false: 0, true: 1}[resign] {
			t.Fatalf("resign=%t: error %v, VerifyMismatch %d", resign, err, st.VerifyMismatch)
		}
		mustReadExact(t, s, 2)
		checkInv(t, s)
		mustClose(t, s)
	}
}

func TestFlippedDigestDroppedAtOpen(t *testing.T) {
	cfg := testConfig(t, 4)
	s, _ := mustOpen(t, cfg)
	mustWrite(t, s, 1)
	file, off, _ := s.slotLocation(1)
	mustClose(t, s)
	rewriteDigest(t, file, off, false /* resign */)
	s, rep := mustOpen(t, cfg)
	defer mustClose(t, s)
	if rep.Records != 0 || rep.Dropped[DropHeaderChecksum] != 1 {
		t.Fatalf("report %+v", rep)
	}
}

func TestOldFormatDroppedAtOpen(t *testing.T) {
	cfg := testConfig(t, 4)
	s, _ := mustOpen(t, cfg)
	mustWrite(t, s, 1)
	file, off, _ := s.slotLocation(1)
	mustClose(t, s)
	// Rewrite the record as format 1, which had no digest.
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, BlockSize)
	if _, err := f.ReadAt(hdr, off); err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint16(hdr[offFormat:], 1)
	binary.LittleEndian.PutUint64(hdr[offHeaderSum:], xxhash.Sum64(hdr[:offHeaderSum]))
	if _, err := f.WriteAt(hdr, off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s, rep := mustOpen(t, cfg)
	defer mustClose(t, s)
	if rep.Records != 0 || rep.Dropped[DropVersion] != 1 || s.Contains(1) {
		t.Fatalf("report %+v", rep)
	}
}
