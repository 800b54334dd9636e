package disk

import (
	"os"
	"testing"
)

// flipBit flips one bit of the byte at off in file.
func flipBit(t *testing.T, file string, off int64) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestPayloadCorruptionDetectedOnRead(t *testing.T) {
	cfg := testConfig(t, 8)
	s, _ := mustOpen(t, cfg)
	mustWrite(t, s, 1)
	mustWrite(t, s, 2)
	file, off, _ := s.slotLocation(1)
	mustClose(t, s)
	flipBit(t, file, off+BlockSize+int64(len(payloadFor(1, testPayload))/2))

	s, rep := mustOpen(t, cfg)
	defer mustClose(t, s)
	if rep.Records != 2 {
		t.Fatalf("payloads are checked on read, yet Open kept %d records", rep.Records)
	}
	dst := AlignedBuffer(testPayload)
	_, _, err := s.ReadSyncDigest(1, digestFor(1), dst)
	wantErr(t, err, ErrCorrupt)
	for i, b := range dst {
		if b != 0 {
			t.Fatalf("corrupt bytes left in dst at %d", i)
		}
	}
	if s.Contains(1) {
		t.Fatal("corrupt block still served")
	}
	if st := s.Stats(); st.ReadErrors.Corrupt != 1 || st.Live != 1 {
		t.Fatalf("stats %+v", st)
	}
	mustReadExact(t, s, 2)
	checkInv(t, s)
	mustWrite(t, s, 3) // the freed slot is reused
	mustReadExact(t, s, 3)
}

func TestHeaderCorruptionDroppedOnOpen(t *testing.T) {
	cfg := testConfig(t, 8)
	s, _ := mustOpen(t, cfg)
	mustWrite(t, s, 1)
	mustWrite(t, s, 2)
	file, off, _ := s.slotLocation(2)
	mustClose(t, s)
	flipBit(t, file, off+offHash+3)

	s, rep := mustOpen(t, cfg)
	if rep.Records != 1 || rep.Dropped[DropHeaderChecksum] != 1 {
		t.Fatalf("report %+v, want 1 record and 1 header-checksum drop", rep)
	}
	if s.Contains(2) {
		t.Fatal("block with a corrupt header is served")
	}
	mustReadExact(t, s, 1)
	mustClose(t, s)
	s, rep = mustOpen(t, cfg)
	defer mustClose(t, s)
	if rep.DroppedTotal() != 0 {
		t.Fatalf("dropped header was not zeroed: %+v", rep)
	}
}

func TestGarbageHeaderDropped(t *testing.T) {
	cfg := testConfig(t, 4)
	s, _ := mustOpen(t, cfg)
	mustClose(t, s)
	if err := os.WriteFile(slotFileName(cfg.Dir, 0), []byte("not a record"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, rep := mustOpen(t, cfg)
	defer mustClose(t, s)
	if rep.Dropped[DropMagic] != 1 || rep.Records != 0 {
		t.Fatalf("report %+v", rep)
	}
	checkInv(t, s)
}
