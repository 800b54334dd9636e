package disk

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/kvtier/kvtier/policy"
)

const testPayload = 8 << 10 // 8 KiB payloads keep test files small

// testConfig returns a config for a store of n slots in a fresh temp dir.
func testConfig(t testing.TB, slots int) Config {
	return Config{
		Dir:           t.TempDir(),
		CapacityBytes: int64(slots) * SlotBytes(testPayload),
		PayloadBytes:  testPayload,
		Fingerprint:   0xfeedface,
		Policy:        policy.LRU,
	}
}

func mustOpen(t testing.TB, cfg Config) (*Store, OpenReport) {
	t.Helper()
	s, rep, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s, rep
}

func mustClose(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func checkInv(t testing.TB, s *Store) {
	t.Helper()
	if err := s.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// payloadFor returns the deterministic payload of block hash: its length
// (1 .. max) and bytes derive from the hash, so a verifier needs only the
// hash. It is aligned so O_DIRECT writes it in place.
func payloadFor(hash uint64, max int) []byte {
	r := rand.New(rand.NewPCG(hash, 0x9e3779b97f4a7c15))
	n := 1 + r.IntN(max)
	p := AlignedBuffer(n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(p[i:], r.Uint64())
	}
	for i := n &^ 7; i < n; i++ {
		p[i] = byte(r.Uint32())
	}
	return p
}

func metaFor(hash uint64) Meta {
	return Meta{Hash: hash, Parent: hash ^ 0x5555, Namespace: hash % 3, Tokens: int(hash % 64), Digest: digestFor(hash)}
}

// digestFor is block hash's stand-in prefix digest: SHA-256 of the hash.
func digestFor(hash uint64) [32]byte {
	return sha256.Sum256(binary.LittleEndian.AppendUint64(nil, hash))
}

func mustWrite(t testing.TB, s *Store, hash uint64) (Meta, bool) {
	t.Helper()
	v, ev, err := s.WriteSync(metaFor(hash), payloadFor(hash, testPayload))
	if err != nil {
		t.Fatalf("WriteSync %x: %v", hash, err)
	}
	return v, ev
}

// mustReadExact reads hash and checks its metadata and bytes.
func mustReadExact(t testing.TB, s *Store, hash uint64) {
	t.Helper()
	dst := AlignedBuffer(testPayload)
	m, n, err := s.ReadSyncDigest(hash, digestFor(hash), dst)
	if err != nil {
		t.Fatalf("ReadSync %x: %v", hash, err)
	}
	if m != metaFor(hash) {
		t.Fatalf("ReadSync %x: meta %+v, want %+v", hash, m, metaFor(hash))
	}
	if want := payloadFor(hash, testPayload); !bytes.Equal(dst[:n], want) {
		t.Fatalf("ReadSync %x: %d bytes differ from the %d written", hash, n, len(want))
	}
}

func wantErr(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want %v", err, target)
	}
}
