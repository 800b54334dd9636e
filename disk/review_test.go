package disk

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kvtier/kvtier/policy"
)

// TestRemoveOfOverwrittenVictim: PlanWrite evicts a victim whose header
// stays in the slot until the new write's header lands. A removal of the
// victim meanwhile (here after it was written again elsewhere) is not
// durable — a crash would bring the old record back at Open — and says so
// (ErrNotDurable; it used to return nil, review of 2026-11-27); once the
// write has landed, the removal holds across a crash. The failed-write
// variant is TestFailedWriteCannotResurrectRemovedBlock.
func TestRemoveOfOverwrittenVictim(t *testing.T) {
	cfg, _ := faultConfig(t, 3, true)
	s, _ := mustOpen(t, cfg)
	op, v := evictingWrite(t, s)
	if !s.Overwriting(v.Hash) {
		t.Fatalf("victim %v: overwriting %t", v, s.Overwriting(v.Hash))
	}
	other := uint64(1)
	if other == v.Hash {
		other = 2
	}
	if err := s.RemoveSync(other); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, s, v.Hash) // the victim again, in another slot
	if err := s.RemoveSync(v.Hash); !errors.Is(err, ErrNotDurable) {
		t.Fatalf("removal of the victim while the write evicting it is in flight: %v, want ErrNotDurable", err)
	}
	if s.Contains(v.Hash) {
		t.Fatal("the victim is still contained after its removal")
	}
	checkInv(t, s)
	if err := op.Execute(payloadFor(9, testPayload)); err != nil {
		t.Fatal(err)
	}
	s.CompleteWrite(op, nil)
	if s.Overwriting(v.Hash) {
		t.Fatal("still overwriting after the write landed")
	}
	if err := s.RemoveSync(v.Hash); !errors.Is(err, ErrNotFound) {
		t.Fatalf("removal after the write landed: %v, want ErrNotFound (nothing of it left)", err)
	}
	checkInv(t, s)
	s.crash()
	s, rep := mustOpen(t, cfg)
	defer mustClose(t, s)
	if s.Contains(v.Hash) {
		t.Fatalf("block %d is back after Open (report %+v)", v.Hash, rep)
	}
	if !s.Contains(9) {
		t.Fatal("the landed write is gone after Open")
	}
}

// instantPayloadFS passes everything to FS except a slot file's payload
// writes, which succeed at once without writing, its fdatasync, which
// fails with EIO, and Allocate, which sizes nothing (the test needs no
// space): the shape of a write whose payload landed and whose fdatasync
// failed, with the payload write as short as can be.
type instantPayloadFS struct {
	FS
	sb      int64
	failOne *atomic.Bool // the next fdatasync fails
}

func (f instantPayloadFS) OpenFile(name string, direct bool) (File, error) {
	inner, err := f.FS.OpenFile(name, direct)
	if err != nil {
		return nil, err
	}
	return instantPayloadFile{File: inner, sb: f.sb, failOne: f.failOne}, nil
}

type instantPayloadFile struct {
	File
	sb      int64
	failOne *atomic.Bool
}

func (f instantPayloadFile) WriteAt(p []byte, off int64) (int, error) {
	if off%f.sb == BlockSize {
		return len(p), nil
	}
	return f.File.WriteAt(p, off)
}
func (f instantPayloadFile) Sync() error {
	if f.failOne.CompareAndSwap(true, false) {
		return unix.EIO // the payload's fdatasync
	}
	return f.File.Sync()
}

func (f instantPayloadFile) Allocate(int64) error { return nil }

// TestWriteExecuteReturnsAfterItsChecksum: WriteOp.execute sums the payload
// on a goroutine while the payload is written; when the payload's fdatasync
// fails it still waits for the sum before it returns (it did not: the
// goroutine went on reading the payload after Execute returned, review of
// 2026-11-27). The payload is the caller's: the disk actor lends a pinned
// slot's bytes until LowerWriteDone, after which the pinned tier reuses the
// slot, and Manager.Close unmaps the pool (pinned.Pool.Discard): a checksum
// still running then faults. (The race detector does not see it: xxhash
// reads in assembly.) The sum is wrapped to mark when it has returned; the
// mark must be set when Execute returns. (The test counted goroutines
// first, which failed in CI when the summing goroutine had handed over its
// sum but not yet exited.)
func TestWriteExecuteReturnsAfterItsChecksum(t *testing.T) {
	const payloadBytes = 64 << 20 // long enough to sum that a return before it would be seen
	sb := SlotBytes(payloadBytes)
	failOne := new(atomic.Bool)
	cfg := Config{Dir: t.TempDir(), CapacityBytes: sb, PayloadBytes: payloadBytes, Fingerprint: 1,
		Policy: policy.LRU, Sync: true /* split write: payload, fdatasync, header */, NoDirectIO: true,
		FS: instantPayloadFS{FS: OSFS{}, sb: sb, failOne: failOne}}
	s, _ := mustOpen(t, cfg)
	defer mustClose(t, s)
	summed := new(atomic.Int64)
	sumPayload = func(p []byte) uint64 {
		v := Checksum(p)
		summed.Add(1)
		return v
	}
	t.Cleanup(func() { sumPayload = Checksum })
	payload := make([]byte, payloadBytes)
	for try := range 3 {
		op, err := s.PlanWrite(metaFor(uint64(7 + try)))
		if err != nil {
			t.Fatal(err)
		}
		failOne.Store(true)
		before := summed.Load()
		err = op.Execute(payload)
		// From here the caller owns payload again (the actor answers
		// LowerWriteDone once Execute returned).
		after := summed.Load()
		s.CompleteWrite(op, err)
		if err == nil {
			t.Fatal("write with a failing fdatasync succeeded")
		}
		if after != before+1 {
			t.Fatalf("Execute returned (%v) before its checksum of the payload finished (%d sums done, want %d)", err, after-before, 1)
		}
	}
}

// TestFewerFilesRemovesTheFilesPastThem: Open opens slot files
// 0..Files-1; a store reopened with fewer Files removes the slot files past
// them. It used to leave them (review of 2026-11-27): a delete of their
// blocks found nothing to remove, and a store reopened later with more
// Files indexed them again — a block whose removal was acknowledged in
// between was served.
func TestFewerFilesRemovesTheFilesPastThem(t *testing.T) {
	cfg := testConfig(t, 4)
	cfg.Files = 2
	s, _ := mustOpen(t, cfg)
	mustWrite(t, s, 1) // slot 0, file 0
	mustWrite(t, s, 2) // slot 1, file 1
	name, _, _ := s.slotLocation(2)
	mustClose(t, s)
	if name != slotFileName(cfg.Dir, 1) {
		t.Fatalf("block 2 in %s, want file 1", name)
	}

	one := cfg
	one.Files = 1
	one.CapacityBytes = 2 * SlotBytes(testPayload)
	s, _ = mustOpen(t, one)
	mustWrite(t, s, 2) // the same block again, in file 0
	if err := s.RemoveSync(2); err != nil {
		t.Fatal(err) // acknowledged: its header is zeroed
	}
	mustClose(t, s)

	s, rep := mustOpen(t, cfg)
	defer mustClose(t, s)
	if s.Contains(2) {
		t.Fatalf("block 2, removed before, is back when the store is reopened with Files=2 again (report %+v)", rep)
	}
}

// headerAtOpen writes block 5 (slot 0, then removed) and block 1 (slot 1)
// in a new 3-slot store on a FaultFS and closes it. It returns the config,
// the FaultFS and the offset of slot 1's header, which the caller makes
// unreadable (or unzeroable) for the next Open (headerBlock matches it).
func headerAtOpen(t *testing.T) (Config, *FaultFS, int64) {
	t.Helper()
	cfg, ffs := faultConfig(t, 3, true)
	s, _ := mustOpen(t, cfg)
	mustWrite(t, s, 5) // slot 0
	mustWrite(t, s, 1) // slot 1
	if err := s.RemoveSync(5); err != nil {
		t.Fatal(err)
	}
	_, off, _ := s.slotLocation(1)
	mustClose(t, s)
	return cfg, ffs, off
}

// headerBlock matches the I/O of the header block at off.
func headerBlock(off int64) func(string, int64, int) bool {
	return func(_ string, o int64, n int) bool { return o == off && n == BlockSize }
}

// TestUnreadableHeaderAtOpenIsScrubbed: a header Open cannot read (an I/O
// error during the scan) is dropped and its slot zeroed (stale, for Close,
// if that fails too). It used to be left untouched (review of 2026-11-27):
// once the error passed, a later Open indexed it again, though the block
// was written again and removed (acknowledged) in between.
func TestUnreadableHeaderAtOpenIsScrubbed(t *testing.T) {
	cfg, ffs, off := headerAtOpen(t)
	// Open cannot read slot 1's header this once.
	ffs.Inject(Fault{Op: FaultRead, Err: unix.EIO, Times: 1, Match: headerBlock(off)})
	s, rep := mustOpen(t, cfg)
	if rep.Dropped[DropIOError] != 1 || s.Contains(1) {
		t.Fatalf("open with slot 1 unreadable: %+v", rep)
	}
	mustWrite(t, s, 1) // the block again, in another slot
	if err := s.RemoveSync(1); err != nil {
		t.Fatal(err) // acknowledged
	}
	mustClose(t, s)

	s, rep = mustOpen(t, cfg)
	defer mustClose(t, s)
	if s.Contains(1) {
		t.Fatalf("block 1, removed before, is back from the slot Open could not read once (report %+v)", rep)
	}
}

// TestDirectReadWritesNothingPastDst: under O_DIRECT ReadOp.Execute reads
// in place only into a dst at least as long as the payload rounded up to
// BlockSize. It used to read into dst[:padded] whenever dst's capacity
// allowed (review of 2026-11-27): the bytes past len(dst) (another slot or
// buffer of the caller's, sharing the backing array) were overwritten with
// whatever follows the payload on disk.
func TestDirectReadWritesNothingPastDst(t *testing.T) {
	cfg := testConfig(t, 2)
	s, _ := mustOpen(t, cfg)
	defer mustClose(t, s)
	if s.Mode() != IODirect {
		t.Skip("needs O_DIRECT")
	}
	m := metaFor(3)
	payload := AlignedBuffer(100)
	for i := range payload {
		payload[i] = 0x11
	}
	if _, _, err := s.WriteSync(m, payload); err != nil {
		t.Fatal(err)
	}
	backing := AlignedBuffer(2 * BlockSize)
	for i := range backing {
		backing[i] = 0xEE // the caller's other data, after dst
	}
	dst := backing[:100]
	if _, n, err := s.ReadSyncDigest(3, m.Digest, dst); err != nil || n != 100 {
		t.Fatalf("read: %d bytes, %v", n, err)
	}
	for i := 100; i < len(backing); i++ {
		if backing[i] != 0xEE {
			t.Fatalf("byte %d past len(dst) = 100 overwritten (%#x): the read went past dst", i, backing[i])
		}
	}
}

// evictingWrite fills the 3-slot store s with blocks 1..3 and plans the
// write of block 9, which evicts one of them: the op and its victim.
func evictingWrite(t *testing.T, s *Store) (*WriteOp, Meta) {
	t.Helper()
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
	return op, v
}

// dirLogFS records the removals (those that removed a file), the
// directory syncs and the slot file syncs that reach OSFS.
type dirLogFS struct {
	OSFS
	log []string
}

func (f *dirLogFS) Remove(name string) error {
	err := f.OSFS.Remove(name)
	if err == nil {
		f.log = append(f.log, "remove "+filepath.Base(name))
	}
	return err
}

func (f *dirLogFS) SyncDir(dir string) error {
	f.log = append(f.log, "syncdir "+filepath.Base(dir))
	return f.OSFS.SyncDir(dir)
}

func (f *dirLogFS) OpenFile(name string, direct bool) (File, error) {
	file, err := f.OSFS.OpenFile(name, direct)
	if err != nil {
		return nil, err
	}
	return &syncLogFile{File: file, name: filepath.Base(name), fs: f}, nil
}

type syncLogFile struct {
	File
	name string
	fs   *dirLogFS
}

func (f *syncLogFile) Sync() error {
	f.fs.log = append(f.fs.log, "sync "+f.name)
	return f.File.Sync()
}

// TestSyncedOpenMakesFileChangesDurable: under Config.Sync, Open syncs
// what it changed: each slot file (a length cut to a smaller capacity),
// then the store directory (the slot files it created, those past
// Config.Files it removed) and its parent (a store directory MkdirAll
// created). Without them (as before) a machine crash could undo the
// removal — the file and its records back for an Open with more Files —
// or a cut (records past it back for an Open with more capacity), or lose
// a created file or directory with the records fdatasync had made durable.
func TestSyncedOpenMakesFileChangesDurable(t *testing.T) {
	fsys := &dirLogFS{}
	cfg := testConfig(t, 4)
	cfg.Dir = filepath.Join(cfg.Dir, "store") // created by Open
	cfg.Files, cfg.Sync, cfg.FS = 2, true, fsys
	s, _ := mustOpen(t, cfg)
	if want := []string{"sync slots-000.kv", "sync slots-001.kv", "syncdir store", "syncdir " + filepath.Base(filepath.Dir(cfg.Dir))}; !slices.Equal(fsys.log, want) {
		t.Fatalf("creating the store: %q, want %q", fsys.log, want)
	}
	mustWrite(t, s, 1)
	mustClose(t, s)

	fsys.log = nil
	one := cfg
	one.Files = 1
	one.CapacityBytes = 2 * SlotBytes(testPayload)
	s, _ = mustOpen(t, one)
	mustClose(t, s)
	if want := []string{"remove slots-001.kv", "sync slots-000.kv", "syncdir store"}; !slices.Equal(fsys.log[:min(3, len(fsys.log))], want) {
		t.Fatalf("reopening with fewer files and slots: %q, want %q first", fsys.log, want)
	}
}

// TestUnreadableUnzeroableHeaderMakesRemovalsNotDurable: a header Open
// could neither read nor zero may hold a record of any block; a later
// Open that reads it would bring that block back. Until Close scrubs it,
// RemoveSync says no removal is durable (ErrNotDurable). It used to
// mark the slot stale with no hash (left open from the review of
// 2026-11-27): the removal of that very block was acknowledged as durable.
func TestUnreadableUnzeroableHeaderMakesRemovalsNotDurable(t *testing.T) {
	cfg, ffs, off := headerAtOpen(t)
	// Open can neither read slot 1's header nor zero it, this once each.
	at := headerBlock(off)
	ffs.Inject(Fault{Op: FaultRead, Err: unix.EIO, Times: 1, Match: at})
	ffs.Inject(Fault{Op: FaultWrite, Err: unix.EIO, Times: 1, Match: at})
	s, rep := mustOpen(t, cfg)
	if rep.Dropped[DropIOError] != 1 || s.Contains(1) {
		t.Fatalf("open with slot 1 unreadable: %+v", rep)
	}
	checkInv(t, s)
	if !s.StaleHolds(1) || !s.StaleHolds(42) {
		t.Fatal("an unread, unzeroed header: StaleHolds false, though it may hold any record")
	}
	mustWrite(t, s, 1) // the block again, in another slot
	err := s.RemoveSync(1)
	if !errors.Is(err, ErrNotDurable) {
		t.Fatalf("removal while a header that may hold block 1 is left: %v, want ErrNotDurable", err)
	}
	if s.Contains(1) {
		t.Fatal("block 1 still live after its removal")
	}
	checkInv(t, s)
	mustClose(t, s) // scrubs slot 1

	s, _ = mustOpen(t, cfg)
	defer mustClose(t, s)
	if s.Contains(1) || s.StaleHolds(1) {
		t.Fatal("after Close scrubbed the header: block 1 back, or still stale")
	}
	mustWrite(t, s, 1)
	if err := s.RemoveSync(1); err != nil {
		t.Fatalf("removal once nothing stale is left: %v", err)
	}
}

// TestWriteOfAnotherDigestDisplaces: a write of a hash the store holds
// with another digest (another prefix under the 64-bit hash, a forged
// collision) replaces the record, in its own slot, reported as the
// write's victim; reads then get the new block for its digest and a
// mismatch for the old. It used to be refused (ErrExists), so the first
// writer of a hash kept it on disk: a tenant that forged a victim's chain
// and wrote it first kept the victim's blocks off the disk. A write of the
// same digest is still ErrExists, and so is one over a record a read pins.
func TestWriteOfAnotherDigestDisplaces(t *testing.T) {
	s, _ := mustOpen(t, testConfig(t, 4))
	defer mustClose(t, s)
	old := metaFor(1)
	mustWrite(t, s, 1)
	if _, err := s.PlanWrite(old); !errors.Is(err, ErrExists) {
		t.Fatalf("a write of the block held: %v, want ErrExists", err)
	}

	forged := old
	forged.Digest[0] ^= 1
	rd, _, err := s.PlanRead(1, old.Digest) // a read pins the record
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PlanWrite(forged); !errors.Is(err, ErrExists) {
		t.Fatalf("a write of another digest over a record being read: %v, want ErrExists", err)
	}
	buf := AlignedBuffer(testPayload)
	s.CompleteRead(rd, rd.Execute(buf))

	payload := payloadFor(99, testPayload)
	victim, evicted, err := s.WriteSync(forged, payload)
	if err != nil || !evicted || victim != old {
		t.Fatalf("a write of another digest: victim %+v evicted %t err %v, want the old record displaced", victim, evicted, err)
	}
	checkInv(t, s)
	if st := s.Stats(); st.Displaced != 1 || st.Live != 1 {
		t.Fatalf("stats %+v, want one displaced record and one live", st)
	}
	dst := AlignedBuffer(testPayload)
	if _, n, err := s.ReadSyncDigest(1, forged.Digest, dst); err != nil || !bytes.Equal(dst[:n], payload) {
		t.Fatalf("read of the new block: %d bytes, %v", n, err)
	}
	if _, _, err := s.ReadSyncDigest(1, old.Digest, dst); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("read of the displaced block: %v, want ErrDigestMismatch", err)
	}
}

// TestSmallerStoreCountsTheRecordsItCuts: a store reopened with a smaller
// capacity, or fewer Files, reports the records it cut away with that part
// of the store as Dropped[DropCapacity], and logs them. They vanished
// unreported: a 4-record store reopened with room for 2 said Records 2 and
// nothing dropped (engine-contract review of 2026-11-28).
func TestSmallerStoreCountsTheRecordsItCuts(t *testing.T) {
	cfg := testConfig(t, 8)
	s, _ := mustOpen(t, cfg)
	for h := uint64(1); h <= 6; h++ {
		mustWrite(t, s, h) // slots 0..5
	}
	mustClose(t, s)

	small := cfg
	small.CapacityBytes = 4 * SlotBytes(testPayload)
	s, rep := mustOpen(t, small)
	if rep.Records != 4 || rep.Dropped[DropCapacity] != 2 || rep.DroppedTotal() != 2 {
		t.Fatalf("reopened with 4 of 8 slots: report %+v, want 4 records and 2 dropped for capacity", rep)
	}
	mustClose(t, s)
	s, rep = mustOpen(t, small) // nothing more to cut
	if rep.Records != 4 || rep.DroppedTotal() != 0 {
		t.Fatalf("reopened again with 4 slots: report %+v, want 4 records, none dropped", rep)
	}
	mustClose(t, s)

	two := cfg
	two.Files = 2
	s, _ = mustOpen(t, two) // 8 slots over two files: 4 records, slots 0..3
	for h := uint64(11); h <= 14; h++ {
		mustWrite(t, s, h)
	}
	mustClose(t, s)
	one := cfg
	one.CapacityBytes = 4 * SlotBytes(testPayload)
	s, rep = mustOpen(t, one) // file 1 removed, file 0 cut to 4 slots
	defer mustClose(t, s)
	if got := rep.Records + rep.Dropped[DropCapacity]; got != 8 || rep.Dropped[DropCapacity] == 0 {
		t.Fatalf("reopened with one file of 4 slots: report %+v, want the 8 records found either kept or dropped for capacity", rep)
	}
	if _, err := os.Stat(slotFileName(cfg.Dir, 1)); !os.IsNotExist(err) {
		t.Fatalf("slot file 1 past Files=1: stat %v, want it removed", err)
	}
	if _, err := os.Stat(slotFileName(cfg.Dir, 2)); !os.IsNotExist(err) {
		t.Fatalf("slot file 2 (never existed): stat %v, want none created", err)
	}
}
