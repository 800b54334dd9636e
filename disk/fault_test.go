package disk

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// payloadWrites and headerWrites match writes of payloads and headers.
func payloadWrites(sb int64) func(string, int64, int) bool {
	return func(_ string, off int64, _ int) bool { return off%sb == BlockSize }
}

func headerWrites(sb int64) func(string, int64, int) bool {
	return func(_ string, off int64, _ int) bool { return off%sb == 0 }
}

// crashMidWrite injects tear and, behind it, a failure of the next write:
// the failed write's scrub of its header, which a process that crashed
// mid-write never gets to run.
func crashMidWrite(ffs *FaultFS, tear Fault) {
	ffs.Inject(tear)
	ffs.Inject(Fault{Op: FaultWrite, Err: unix.EIO, Times: 1})
}

func faultConfig(t *testing.T, slots int, noDirect bool) (Config, *FaultFS) {
	cfg := testConfig(t, slots)
	ffs := &FaultFS{NoDirect: noDirect}
	cfg.FS = ffs
	return cfg, ffs
}

// afterFault checks that the failed block is absent and that the store
// still writes and reads.
func afterFault(t *testing.T, s *Store, failed, next uint64) {
	t.Helper()
	if s.Contains(failed) {
		t.Fatalf("block %x published despite the fault", failed)
	}
	checkInv(t, s)
	mustWrite(t, s, next)
	mustReadExact(t, s, next)
	checkInv(t, s)
}

func TestWriteFaults(t *testing.T) {
	sb := SlotBytes(testPayload)
	for _, tc := range []struct {
		name  string
		fault Fault
		count func(ErrorCounts) int64
		want  error
	}{
		{"eio-payload", Fault{Op: FaultWrite, Err: unix.EIO, Match: payloadWrites(sb), Times: 1},
			func(c ErrorCounts) int64 { return c.EIO }, unix.EIO},
		{"eio-header", Fault{Op: FaultWrite, Err: unix.EIO, Match: headerWrites(sb), Times: 1},
			func(c ErrorCounts) int64 { return c.EIO }, unix.EIO},
		{"enospc-payload", Fault{Op: FaultWrite, Err: unix.ENOSPC, Match: payloadWrites(sb), Times: 1},
			func(c ErrorCounts) int64 { return c.ENOSPC }, unix.ENOSPC},
		{"short-header", Fault{Op: FaultWrite, Partial: 100, Match: headerWrites(sb), Times: 1},
			func(c ErrorCounts) int64 { return c.Short }, nil},
		{"eio-sync", Fault{Op: FaultSync, Err: unix.EIO, Times: 1},
			func(c ErrorCounts) int64 { return c.EIO }, unix.EIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, ffs := faultConfig(t, 4, true /* noDirect: partial writes */)
			cfg.Sync = true
			s, _ := mustOpen(t, cfg)
			defer mustClose(t, s)
			mustWrite(t, s, 1)
			ffs.Inject(tc.fault)
			_, _, err := s.WriteSync(metaFor(2), payloadFor(2, testPayload))
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("WriteSync under fault: %v, want %v", err, tc.want)
			}
			st := s.Stats()
			if tc.count(st.WriteErrors) != 1 || st.WriteErrors.Total() != 1 || st.Free != 3 {
				t.Fatalf("stats after fault %+v", st)
			}
			afterFault(t, s, 2, 3)
			mustReadExact(t, s, 1)
			mustWrite(t, s, 2) // the failed hash can be written again
			mustReadExact(t, s, 2)
		})
	}
}

func TestTornHeaderDroppedOnOpen(t *testing.T) {
	cfg, ffs := faultConfig(t, 4, true)
	s, _ := mustOpen(t, cfg)
	mustWrite(t, s, 1)
	crashMidWrite(ffs, Fault{Op: FaultWrite, Err: unix.EIO, Partial: 40, Match: headerWrites(SlotBytes(testPayload)), Times: 1})
	if _, _, err := s.WriteSync(metaFor(2), payloadFor(2, testPayload)); !errors.Is(err, unix.EIO) {
		t.Fatalf("torn write: %v", err)
	}
	s.crash()
	s, rep := mustOpen(t, cfg)
	defer mustClose(t, s)
	if rep.Records != 1 || rep.Dropped[DropHeaderChecksum] != 1 {
		t.Fatalf("report %+v, want the torn header dropped", rep)
	}
	mustReadExact(t, s, 1)
}

// A crash midway through overwriting an evicted slot's payload, written
// before its header (the way of payloads of defaultSplitWriteMin and up),
// leaves the victim's header over foreign bytes: it must be detected, not
// served.
func TestTornOverwriteNeverServed(t *testing.T) {
	cfg, ffs := faultConfig(t, 2, true)
	s, _ := mustOpen(t, cfg)
	s.splitWriteMin = 0 // every payload written apart from its header
	mustWrite(t, s, 1)
	mustWrite(t, s, 2)
	crashMidWrite(ffs, Fault{Op: FaultWrite, Err: unix.EIO, Partial: 3000, Match: payloadWrites(SlotBytes(testPayload)), Times: 1})
	v, ev, err := s.WriteSync(metaFor(3), payloadFor(3, testPayload))
	if !errors.Is(err, unix.EIO) || !ev || v.Hash != 1 {
		t.Fatalf("overwrite: victim %v/%t err %v", v, ev, err)
	}
	s.crash()
	s, rep := mustOpen(t, cfg)
	defer mustClose(t, s)
	if rep.Records != 2 {
		t.Fatalf("report %+v: the old header should still be indexed", rep)
	}
	_, _, err = s.ReadSyncDigest(1, digestFor(1), AlignedBuffer(testPayload))
	wantErr(t, err, ErrCorrupt)
	mustReadExact(t, s, 2)
	checkInv(t, s)
}

// A small payload goes with its header in one pwritev. Torn inside the
// header, the header's own checksum fails and Open drops it; torn inside
// the payload, the new header's payload checksum fails and the read reports
// the block corrupt. Either way the victim is gone and nothing wrong is
// served.
func TestTornVectoredWriteNeverServed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		partial int
		dropped bool // at Open, by the header's checksum
	}{
		{"in the header", 40, true},
		{"in the payload", BlockSize + 3000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, ffs := faultConfig(t, 2, true)
			s, _ := mustOpen(t, cfg)
			mustWrite(t, s, 1)
			mustWrite(t, s, 2)
			before := ffs.Counts()
			crashMidWrite(ffs, Fault{Op: FaultWrite, Err: unix.EIO, Partial: tc.partial, Match: headerWrites(SlotBytes(testPayload)), Times: 1})
			v, ev, err := s.WriteSync(metaFor(3), payloadFor(3, testPayload))
			if !errors.Is(err, unix.EIO) || !ev || v.Hash != 1 {
				t.Fatalf("overwrite: victim %v/%t err %v", v, ev, err)
			}
			if c := ffs.Counts(); c.Writes != before.Writes+2 || c.WriteBytes != before.WriteBytes+int64(tc.partial) {
				t.Fatalf("%d writes of %d bytes for one block, want one torn pwritev of %d and the failed scrub",
					c.Writes-before.Writes, c.WriteBytes-before.WriteBytes, tc.partial)
			}
			s.crash()
			s, rep := mustOpen(t, cfg)
			defer mustClose(t, s)
			if tc.dropped {
				if rep.Records != 1 || rep.Dropped[DropHeaderChecksum] != 1 {
					t.Fatalf("report %+v, want the torn header dropped", rep)
				}
			} else {
				if rep.Records != 2 {
					t.Fatalf("report %+v: the new header should be indexed", rep)
				}
				_, _, err = s.ReadSyncDigest(3, digestFor(3), AlignedBuffer(testPayload))
				wantErr(t, err, ErrCorrupt)
			}
			if s.Contains(1) {
				t.Fatal("the victim is still indexed after its slot was overwritten")
			}
			mustReadExact(t, s, 2)
			checkInv(t, s)
		})
	}
}

func TestReadFaults(t *testing.T) {
	for _, direct := range []bool{true, false} {
		cfg, ffs := faultConfig(t, 4, !direct)
		s, rep := mustOpen(t, cfg)
		if direct && rep.Mode != IODirect {
			t.Logf("O_DIRECT unsupported here: %v", rep.Mode)
		}
		mustWrite(t, s, 1)
		mustWrite(t, s, 2)
		ffs.Inject(Fault{Op: FaultRead, Err: unix.EIO, Times: 1})
		_, _, err := s.ReadSyncDigest(1, digestFor(1), AlignedBuffer(testPayload))
		wantErr(t, err, unix.EIO)
		if s.Contains(1) || s.Stats().ReadErrors.EIO != 1 {
			t.Fatalf("block still served after EIO, stats %+v", s.Stats())
		}
		// A short read (here: nothing transferred, no error) is an error too, never data.
		ffs.Inject(Fault{Op: FaultRead, Times: 1})
		_, _, err = s.ReadSyncDigest(2, digestFor(2), AlignedBuffer(testPayload))
		if err == nil || s.Contains(2) || s.Stats().ReadErrors.Short != 1 {
			t.Fatalf("short read: %v, stats %+v", err, s.Stats())
		}
		afterFault(t, s, 1, 3)
		mustClose(t, s)
	}
}

func TestDirectFallback(t *testing.T) {
	cfg, _ := faultConfig(t, 4, true)
	s, rep := mustOpen(t, cfg)
	defer mustClose(t, s)
	if rep.Mode != IOBuffered || s.Mode() != IOBuffered || s.Stats().Mode != IOBuffered {
		t.Fatalf("mode %v with O_DIRECT refused", rep.Mode)
	}
	mustWrite(t, s, 1)
	mustReadExact(t, s, 1)
}

// plainFS hides the optional VectoredReader so reads take two ReadAt calls.
type plainFS struct{ FS }

type plainFile struct{ File }

func (p plainFS) OpenFile(name string, direct bool) (File, error) {
	f, err := p.FS.OpenFile(name, direct)
	if err != nil {
		return nil, err
	}
	return plainFile{f}, nil
}

func TestReadsWithoutPreadv(t *testing.T) {
	cfg, ffs := faultConfig(t, 4, false)
	cfg.FS = plainFS{ffs}
	s, _ := mustOpen(t, cfg)
	defer mustClose(t, s)
	mustWrite(t, s, 1)
	before := ffs.Counts().Reads
	mustReadExact(t, s, 1)
	if n := ffs.Counts().Reads - before; n != 2 {
		t.Fatalf("%d reads without preadv, want header + payload = 2", n)
	}
	ffs.Inject(Fault{Op: FaultRead, Err: unix.EIO, Times: 1, Match: func(_ string, off int64, _ int) bool { return off%SlotBytes(testPayload) != 0 }})
	_, _, err := s.ReadSyncDigest(1, digestFor(1), AlignedBuffer(testPayload))
	wantErr(t, err, unix.EIO)
	afterFault(t, s, 1, 2)
}

// A failed vectored call reports n >= 0 (io's rule), so FaultFS's byte
// counts never go down; and a Partial read tears inside the payload too.
func TestVectoredFailureCountsAndTornRead(t *testing.T) {
	ffs := &FaultFS{NoDirect: true}
	f, err := ffs.OpenFile(t.TempDir()+"/f", false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, werr := f.(VectoredWriter).WritevAt([][]byte{make([]byte, 10)}, -1)
	m, rerr := f.(VectoredReader).ReadvAt([][]byte{make([]byte, 10)}, -1)
	if c := ffs.Counts(); werr == nil || rerr == nil || n != 0 || m != 0 || c.WriteBytes != 0 || c.ReadBytes != 0 {
		t.Fatalf("at offset -1: WritevAt %d, %v; ReadvAt %d, %v; counts %+v", n, werr, m, rerr, c)
	}
	data := bytes.Repeat([]byte{7}, 100)
	if _, err := f.(VectoredWriter).WritevAt([][]byte{data[:40], data[40:]}, 0); err != nil {
		t.Fatal(err)
	}
	ffs.Inject(Fault{Op: FaultRead, Err: unix.EIO, Partial: 70, Times: 1})
	a, b := make([]byte, 40), make([]byte, 60)
	k, err := f.(VectoredReader).ReadvAt([][]byte{a, b}, 0)
	if !errors.Is(err, unix.EIO) || k != 70 || !bytes.Equal(a, data[:40]) || !bytes.Equal(b[:30], data[40:70]) || b[30] != 0 {
		t.Fatalf("torn read: %d bytes, %v; want 70 across both buffers", k, err)
	}
}
