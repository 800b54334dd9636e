package disk

import (
	"bytes"
	"os"
	"testing"
)

// TestStaleGenerationNeverServed: a slot rewritten with a new record of
// the same block, whose write the device acknowledged but lost (the old
// record, header checksum and payload checksum intact, is what the slot
// still holds), is reported corrupt: the index's generation is the one
// the read must find. (Mutation test: the read without its generation
// comparison served the stale record and no other test failed.)
func TestStaleGenerationNeverServed(t *testing.T) {
	cfg := testConfig(t, 1)
	s, _ := mustOpen(t, cfg)
	defer mustClose(t, s)
	m := metaFor(7)
	old := payloadFor(7, testPayload)
	if _, _, err := s.WriteSync(m, old); err != nil {
		t.Fatal(err)
	}
	name, off, ok := s.slotLocation(7)
	if !ok {
		t.Fatal("hash 7 not indexed after its write")
	}
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stale := make([]byte, SlotBytes(testPayload))
	if _, err := f.ReadAt(stale, off); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveSync(7); err != nil {
		t.Fatal(err)
	}
	// The block written again, with other bytes (a recompute), into the
	// store's only slot: a newer generation.
	fresh := bytes.Clone(old)
	for i := range fresh {
		fresh[i] ^= 0xa5
	}
	freshBuf := AlignedBuffer(len(fresh))
	copy(freshBuf, fresh)
	if _, _, err := s.WriteSync(m, freshBuf); err != nil {
		t.Fatal(err)
	}
	if name2, off2, _ := s.slotLocation(7); name2 != name || off2 != off {
		t.Fatalf("rewrite went to %s@%d, want the only slot %s@%d (test setup)", name2, off2, name, off)
	}
	// The rewrite lost: the slot holds the old record again.
	if _, err := f.WriteAt(stale, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	dst := AlignedBuffer(testPayload)
	_, n, err := s.ReadSyncDigest(7, m.Digest, dst)
	if err == nil {
		t.Fatalf("the stale record was served (%d bytes, equal to the old payload: %t) for the rewritten block",
			n, bytes.Equal(dst[:n], old))
	}
	wantErr(t, err, ErrCorrupt)
}
