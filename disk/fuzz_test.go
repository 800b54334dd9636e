package disk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// validHeader returns the encoded header of a typical record, for seeds.
func validHeader(r record) []byte {
	hdr := make([]byte, BlockSize)
	encodeHeader(hdr, &r)
	return hdr
}

func seedRecord() record {
	return record{
		fingerprint: 0xfeedface, meta: Meta{Namespace: 2, Hash: 0x1234, Parent: 0x1234 ^ 0x5555, Tokens: 16, Digest: digestFor(0x1234)},
		payloadLen: 512, slotBytes: SlotBytes(512), payloadSum: Checksum([]byte("payload")), generation: 9,
	}
}

// FuzzRecordDecode feeds arbitrary bytes to decodeHeader as a slot's header
// block. It must not panic, and its verdict must follow from the bytes alone:
// all-zero used bytes are empty, a wrong magic is bad magic, a checksum that
// does not verify is bad checksum, an unknown version is bad version, and only
// a header whose checksum verifies is valid, decoding to fields that
// re-encode to the very same bytes.
func FuzzRecordDecode(f *testing.F) {
	// Seeds: testdata/fuzz/FuzzRecordDecode (a valid header, an empty one,
	// one with a bad checksum, one with a bad version and garbage).
	f.Fuzz(func(t *testing.T, data []byte) {
		hdr := make([]byte, BlockSize)
		copy(hdr, data)
		orig := bytes.Clone(hdr)
		var r record
		st := decodeHeader(hdr, &r)
		if !bytes.Equal(hdr, orig) {
			t.Fatal("decodeHeader modified its input")
		}
		le := binary.LittleEndian
		magicOK := le.Uint32(hdr[offMagic:]) == recordMagic
		sumOK := le.Uint64(hdr[offHeaderSum:]) == xxhash.Sum64(hdr[:offHeaderSum])
		versionOK := le.Uint16(hdr[offFormat:]) == FormatVersion && le.Uint16(hdr[offScheme:]) == HashSchemeVersion
		var want headerStatus
		switch {
		case !magicOK && bytes.Count(hdr[:headerUsed], []byte{0}) == headerUsed:
			want = headerEmpty
		case !magicOK:
			want = headerBadMagic
		case !sumOK:
			want = headerBadChecksum
		case !versionOK:
			want = headerBadVersion
		default:
			want = headerValid
		}
		if st != want {
			t.Fatalf("decodeHeader = %d, want %d (magic ok %v, checksum ok %v, version ok %v)", st, want, magicOK, sumOK, versionOK)
		}
		if st != headerValid {
			if r != (record{}) {
				t.Fatalf("status %d filled the record: %+v", st, r)
			}
			return
		}
		again := make([]byte, BlockSize)
		encodeHeader(again, &r)
		if !bytes.Equal(again[:headerUsed], hdr[:headerUsed]) {
			t.Fatalf("accepted header does not re-encode to itself:\n got %x\nwant %x", again[:headerUsed], hdr[:headerUsed])
		}
		// The chain extension past the record's bytes: whatever it holds,
		// decoding it never panics, never changes the record, and a Chain
		// it accepts is consistent with the record.
		c, cs := decodeChain(hdr, &r)
		if !bytes.Equal(hdr, orig) {
			t.Fatal("decodeChain modified its input")
		}
		if (c != nil) != (cs == chainValid) || cs == chainNone && !allZero(hdr[headerUsed:]) {
			t.Fatalf("decodeChain = %+v, status %d", c, cs)
		}
		if c != nil && c.TokenIDs != nil && len(c.TokenIDs) != r.meta.Tokens {
			t.Fatalf("chain of %d token ids for a %d-token record", len(c.TokenIDs), r.meta.Tokens)
		}
	})
}

// FuzzRecordRoundTrip encodes a record of arbitrary field values: it must
// decode to the same record, and flipping any one bit of the header's used
// bytes must make the decoder reject it. Bits past headerUsed are padding the
// checksum does not cover; the decoder ignores them.
func FuzzRecordRoundTrip(f *testing.F) {
	// Seeds: testdata/fuzz/FuzzRecordRoundTrip.
	f.Fuzz(func(t *testing.T, fp, ns, hash, parent uint64, tokens, payloadLen, slotBytes int64, sum, gen uint64, digest []byte, bit uint16) {
		r := record{
			fingerprint: fp, meta: Meta{Namespace: ns, Hash: hash, Parent: parent, Tokens: int(tokens)},
			payloadLen: payloadLen, slotBytes: slotBytes, payloadSum: sum, generation: gen,
		}
		copy(r.meta.Digest[:], digest)
		hdr := make([]byte, BlockSize)
		for i := range hdr {
			hdr[i] = 0xa5 // encodeHeader must clear what it does not write
		}
		encodeHeader(hdr, &r)
		if bytes.Count(hdr[headerUsed:], []byte{0}) != BlockSize-headerUsed {
			t.Fatal("encodeHeader left bytes past the used header")
		}
		var got record
		if st := decodeHeader(hdr, &got); st != headerValid || got != r {
			t.Fatalf("round trip: status %d, record %+v, want %+v", st, got, r)
		}
		b := int(bit) % (headerUsed * 8)
		hdr[b/8] ^= 1 << (b % 8)
		var bad record
		if st := decodeHeader(hdr, &bad); st == headerValid || st == headerEmpty {
			t.Fatalf("header with bit %d (byte %d) flipped decoded as %d: %+v", b, b/8, st, bad)
		}
	})
}

// noSyncFS is the OS file system without fdatasync: FuzzStoreRecord checks
// decoding and verification, not durability, and two syncs per Close would
// make its executions I/O bound.
type noSyncFS struct{ OSFS }

type noSyncFile struct{ File }

func (noSyncFile) Sync() error { return nil }

// noSyncVFile keeps the single-preadv read path of files that have one.
type noSyncVFile struct {
	noSyncFile
	VectoredReader
}

func (fs noSyncFS) OpenFile(name string, direct bool) (File, error) {
	f, err := fs.OSFS.OpenFile(name, direct)
	if err != nil {
		return nil, err
	}
	if v, ok := f.(VectoredReader); ok {
		return noSyncVFile{noSyncFile{f}, v}, nil
	}
	return noSyncFile{f}, nil
}

// fuzzPayload is the payload size of FuzzStoreRecord's store: one 4 KiB
// block, so a slot is two blocks.
const fuzzPayload = 1000

// FuzzStoreRecord writes one record through a real Store, XORs fuzz bytes
// into its header (optionally re-signing the header checksum, so the fuzzer
// gets past it to the field checks) and payload on disk, then reopens and
// reads. Open must not fail or panic; it keeps the record exactly when the
// header verifies and matches the store's fingerprint and geometry, and
// zeroes a dropped header; a read succeeds exactly when the payload checksum
// verifies, returns the bytes on disk, and otherwise fails with ErrCorrupt,
// clears dst and drops the block. The store keeps working after either.
func FuzzStoreRecord(f *testing.F) {
	// Seeds: testdata/fuzz/FuzzStoreRecord.
	f.Fuzz(func(t *testing.T, hdrPatch []byte, hdrAt uint16, payPatch []byte, payAt uint16, resign bool) {
		if len(hdrPatch) > BlockSize || len(payPatch) > BlockSize {
			t.Skip("patches longer than a block")
		}
		cfg := Config{Dir: t.TempDir(), CapacityBytes: 2 * SlotBytes(fuzzPayload), PayloadBytes: fuzzPayload,
			Fingerprint: 0xfeedface, NoDirectIO: true, FS: noSyncFS{}}
		const hash = 0x77
		s, _ := mustOpen(t, cfg)
		payload := payloadFor(hash, fuzzPayload)
		if _, _, err := s.WriteSync(metaFor(hash), payload); err != nil {
			t.Fatal(err)
		}
		file, off, ok := s.slotLocation(hash)
		if !ok {
			t.Fatal("written record has no slot")
		}
		mustClose(t, s)

		// Corrupt the slot on disk.
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		slot := raw[off : off+SlotBytes(fuzzPayload)]
		hdr, pay := slot[:BlockSize], slot[BlockSize:]
		for i, b := range hdrPatch {
			hdr[(int(hdrAt)+i)%BlockSize] ^= b
		}
		for i, b := range payPatch {
			pay[(int(payAt)+i)%len(pay)] ^= b
		}
		if resign {
			binary.LittleEndian.PutUint64(hdr[offHeaderSum:], xxhash.Sum64(hdr[:offHeaderSum]))
		}
		if err := os.WriteFile(file, raw, 0o600); err != nil {
			t.Fatal(err)
		}

		// What the store must make of it.
		var r record
		st := decodeHeader(hdr, &r)
		keep := st == headerValid && r.fingerprint == cfg.Fingerprint && r.slotBytes == SlotBytes(fuzzPayload) &&
			r.payloadLen >= 0 && r.payloadLen <= fuzzPayload
		s, rep, err := Open(cfg)
		if err != nil {
			t.Fatalf("Open after corruption: %v", err)
		}
		defer mustClose(t, s)
		checkInv(t, s)
		switch {
		case keep && rep.Records != 1:
			t.Fatalf("valid record dropped: report %+v, header %+v", rep, r)
		case !keep && rep.Records != 0:
			t.Fatalf("record kept though its header is %d (%+v): report %+v", st, r, rep)
		case !keep && st != headerEmpty && rep.DroppedTotal() != 1:
			t.Fatalf("rejected header not counted as dropped: report %+v", rep)
		}
		if !keep {
			if st != headerEmpty {
				onDisk, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if bytes.Count(onDisk[off:off+BlockSize], []byte{0}) != BlockSize {
					t.Fatal("dropped header was not zeroed")
				}
			}
		} else {
			if !s.Contains(r.meta.Hash) {
				t.Fatalf("kept record %x not served", r.meta.Hash)
			}
			dst := AlignedBuffer(fuzzPayload)
			for i := range dst {
				dst[i] = 0xee
			}
			m, n, err := s.ReadSyncDigest(r.meta.Hash, r.meta.Digest, dst)
			onDiskPayload := pay[:r.payloadLen]
			if Checksum(onDiskPayload) == r.payloadSum {
				if err != nil {
					t.Fatalf("ReadSync of a record whose checksums verify: %v", err)
				}
				if m != r.meta || n != int(r.payloadLen) || !bytes.Equal(dst[:n], onDiskPayload) {
					t.Fatalf("ReadSync = %+v, %d bytes; want %+v, the %d bytes on disk", m, n, r.meta, r.payloadLen)
				}
			} else {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("ReadSync of a payload whose checksum fails: %v, want ErrCorrupt", err)
				}
				if bytes.Count(dst[:r.payloadLen], []byte{0}) != int(r.payloadLen) {
					t.Fatal("corrupt payload bytes left in dst")
				}
				if s.Contains(r.meta.Hash) {
					t.Fatal("corrupt record still served")
				}
			}
			checkInv(t, s)
		}
		// The store still takes and serves new records.
		fresh := uint64(0x99)
		if r.meta.Hash == fresh {
			fresh++
		}
		if _, _, err := s.WriteSync(metaFor(fresh), payloadFor(fresh, fuzzPayload)); err != nil {
			t.Fatalf("WriteSync after reopening: %v", err)
		}
		dst := AlignedBuffer(fuzzPayload)
		if m, n, err := s.ReadSyncDigest(fresh, digestFor(fresh), dst); err != nil || m != metaFor(fresh) || !bytes.Equal(dst[:n], payloadFor(fresh, fuzzPayload)) {
			t.Fatalf("ReadSync of a fresh record: %+v, %v", m, err)
		}
		checkInv(t, s)
	})
}

// TestWriteFuzzSeeds writes the disk fuzz seed corpora to testdata/fuzz when
// KVTIER_WRITE_FUZZ_SEEDS is set; otherwise it checks they are committed.
func TestWriteFuzzSeeds(t *testing.T) {
	good := validHeader(seedRecord())
	badSum := bytes.Clone(good)
	badSum[offHash] ^= 1
	badVersion := bytes.Clone(good)
	binary.LittleEndian.PutUint16(badVersion[offFormat:], FormatVersion+1)
	binary.LittleEndian.PutUint64(badVersion[offHeaderSum:], xxhash.Sum64(badVersion[:offHeaderSum]))
	sr := seedRecord()
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	bytesLit := func(b []byte) string { return fmt.Sprintf("[]byte(%q)", b) }
	corpus := func(vals ...string) string { return "go test fuzz v1\n" + strings.Join(vals, "\n") + "\n" }
	roundTrip := func(r record, bit uint16) string {
		return corpus("uint64("+u(r.fingerprint)+")", "uint64("+u(r.meta.Namespace)+")", "uint64("+u(r.meta.Hash)+")",
			"uint64("+u(r.meta.Parent)+")", "int64("+i(int64(r.meta.Tokens))+")", "int64("+i(r.payloadLen)+")",
			"int64("+i(r.slotBytes)+")", "uint64("+u(r.payloadSum)+")", "uint64("+u(r.generation)+")",
			bytesLit(r.meta.Digest[:]), "uint16("+u(uint64(bit))+")")
	}
	store := func(hdrPatch []byte, hdrAt uint16, payPatch []byte, payAt uint16, resign bool) string {
		rs := "false"
		if resign {
			rs = "true"
		}
		return corpus(bytesLit(hdrPatch), "uint16("+u(uint64(hdrAt))+")", bytesLit(payPatch), "uint16("+u(uint64(payAt))+")", "bool("+rs+")")
	}
	le64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	files := map[string]string{
		"FuzzRecordDecode/valid":        corpus(bytesLit(good[:headerUsed])),
		"FuzzRecordDecode/empty":        corpus(bytesLit(nil)),
		"FuzzRecordDecode/bad-checksum": corpus(bytesLit(badSum[:headerUsed])),
		"FuzzRecordDecode/bad-version":  corpus(bytesLit(badVersion[:headerUsed])),
		"FuzzRecordDecode/bad-magic":    corpus(bytesLit([]byte("not a record"))),
		"FuzzRecordDecode/tail-garbage": corpus(bytesLit(append(bytes.Clone(good[:headerUsed]), 0xff, 0xff))),

		"FuzzRecordRoundTrip/typical":       roundTrip(sr, 0),
		"FuzzRecordRoundTrip/flip-checksum": roundTrip(sr, offHeaderSum*8+63),
		"FuzzRecordRoundTrip/flip-magic":    roundTrip(record{meta: Meta{Tokens: -1}, payloadLen: -1, slotBytes: math.MaxInt64}, 5),
		"FuzzRecordRoundTrip/flip-version":  roundTrip(record{generation: math.MaxUint64}, offFormat*8),
		"FuzzRecordRoundTrip/flip-digest":   roundTrip(sr, offDigest*8+100),

		"FuzzStoreRecord/untouched":            store(nil, 0, nil, 0, false),
		"FuzzStoreRecord/payload-flip":         store(nil, 0, []byte{0x10}, 17, false),
		"FuzzStoreRecord/payload-padding":      store(nil, 0, []byte{0xff}, 2000, false), // past payloadLen: not checksummed
		"FuzzStoreRecord/header-flip":          store([]byte{1}, offHash, nil, 0, false),
		"FuzzStoreRecord/resigned-fingerprint": store([]byte{1}, offFingerprint, nil, 0, true),
		"FuzzStoreRecord/resigned-geometry":    store(le64(1<<40), offPayloadLen, nil, 0, true),
		"FuzzStoreRecord/resigned-short-len":   store([]byte{0xff}, offPayloadLen, nil, 0, true),
		"FuzzStoreRecord/resigned-generation":  store(le64(math.MaxUint64), offGeneration, nil, 0, true),
		"FuzzStoreRecord/resigned-version":     store([]byte{2}, offScheme, nil, 0, true),
		"FuzzStoreRecord/header-bad-magic":     store([]byte("junk"), offMagic, nil, 0, false),
		"FuzzStoreRecord/digest-flip":          store([]byte{0x80}, offDigest+31, nil, 0, false),
		"FuzzStoreRecord/resigned-digest":      store([]byte{0x80}, offDigest+31, nil, 0, true),
	}
	write := os.Getenv("KVTIER_WRITE_FUZZ_SEEDS") != ""
	for name, want := range files {
		path := filepath.Join("testdata", "fuzz", name)
		if write {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Errorf("seed %s is not committed or is stale (%v); run with KVTIER_WRITE_FUZZ_SEEDS=1", path, err)
		}
	}
}
