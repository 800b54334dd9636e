package disk

import (
	"bytes"
	"encoding/binary"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// chainFor is block hash's chain: a root for even hashes, the child of
// metaFor's parent for odd ones, under an adapter for hashes that are 1
// modulo 4, with metaFor's token count of ids (wide ones for hashes that
// are 3 modulo 8).
func chainFor(hash uint64) *Chain {
	m := metaFor(hash)
	c := &Chain{HasParent: hash%2 == 1, TokenIDs: make([]int64, m.Tokens)}
	if hash%4 == 1 {
		c.LoRA = "adapter-" + strings.Repeat("x", int(hash%7))
	}
	for i := range c.TokenIDs {
		c.TokenIDs[i] = int64(hash)*1000 + int64(i)
		if hash%8 == 3 {
			c.TokenIDs[i] += 1 << 40
		}
	}
	return c
}

func chainMetaFor(hash uint64) Meta {
	m := metaFor(hash)
	m.Chain = chainFor(hash)
	if !m.Chain.HasParent {
		m.Parent = 0
	}
	return m
}

func sameChain(a, b *Chain) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.HasParent == b.HasParent && a.LoRA == b.LoRA && slices.Equal(a.TokenIDs, b.TokenIDs) &&
		(a.TokenIDs == nil) == (b.TokenIDs == nil)
}

// TestChainRoundTrip: a record's chain extension survives a reopen: Range
// and Meta return each block's parent flag, token ids (4 or 8 bytes each
// on disk) and adapter, and reads serve the verified payload as before.
func TestChainRoundTrip(t *testing.T) {
	cfg := testConfig(t, 32)
	s, _ := mustOpen(t, cfg)
	for h := uint64(1); h <= 16; h++ {
		if _, _, err := s.WriteSync(chainMetaFor(h), payloadFor(h, testPayload)); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, s)

	s, rep := mustOpen(t, cfg)
	defer mustClose(t, s)
	if rep.Records != 16 || rep.BadChains != 0 {
		t.Fatalf("report %+v", rep)
	}
	seen := 0
	s.Range(func(m Meta) bool {
		seen++
		if want := chainMetaFor(m.Hash); !sameChain(m.Chain, want.Chain) || m.Parent != want.Parent {
			t.Errorf("block %d: parent %x chain %+v, want %x %+v", m.Hash, m.Parent, m.Chain, want.Parent, want.Chain)
		}
		return true
	})
	if seen != 16 {
		t.Fatalf("Range saw %d blocks", seen)
	}
	for h := uint64(1); h <= 16; h++ {
		dst := AlignedBuffer(testPayload)
		m, n, err := s.ReadSyncDigest(h, digestFor(h), dst)
		if err != nil || !bytes.Equal(dst[:n], payloadFor(h, testPayload)) || !sameChain(m.Chain, chainFor(h)) {
			t.Fatalf("read %d: %v, chain %+v", h, err, m.Chain)
		}
	}
	s.ReleaseChains()
	s.Range(func(m Meta) bool {
		if m.Chain != nil {
			t.Fatalf("block %d kept its chain after ReleaseChains", m.Hash)
		}
		return true
	})
	// A block whose chain was let go is served as before.
	dst := AlignedBuffer(testPayload)
	if m, n, err := s.ReadSyncDigest(2, digestFor(2), dst); err != nil || m != chainMetaFor(2).recorded() || !bytes.Equal(dst[:n], payloadFor(2, testPayload)) {
		t.Fatalf("read after ReleaseChains: %+v, %v", m, err)
	}
	checkInv(t, s)
}

// TestChainLimits: token ids that do not fit the header block are left
// out (the rest of the chain is kept), a LoRA name that does not fit
// leaves no extension, and token ids that disagree with Meta.Tokens are
// not recorded.
func TestChainLimits(t *testing.T) {
	cfg := testConfig(t, 8)
	s, _ := mustOpen(t, cfg)
	many := make([]int64, 2000)
	cases := []struct {
		m    Meta
		want *Chain
	}{
		{Meta{Hash: 1, Parent: 7, Tokens: 986, Chain: &Chain{HasParent: true, TokenIDs: many[:986]}},
			&Chain{HasParent: true, TokenIDs: many[:986]}},
		{Meta{Hash: 2, Parent: 7, Tokens: 987, Chain: &Chain{HasParent: true, TokenIDs: many[:987], LoRA: "a"}},
			&Chain{HasParent: true, LoRA: "a"}},
		{Meta{Hash: 3, Tokens: 16, Chain: &Chain{TokenIDs: many[:16], LoRA: strings.Repeat("l", BlockSize)}}, nil},
		{Meta{Hash: 4, Tokens: 16, Chain: &Chain{TokenIDs: many[:15], LoRA: "b"}}, &Chain{LoRA: "b"}},
	}
	for _, c := range cases {
		if _, _, err := s.WriteSync(c.m, payloadFor(c.m.Hash, testPayload)); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, s)
	s, rep := mustOpen(t, cfg)
	defer mustClose(t, s)
	if rep.Records != len(cases) || rep.BadChains != 0 {
		t.Fatalf("report %+v", rep)
	}
	for _, c := range cases {
		if m, _ := s.Meta(c.m.Hash); !sameChain(m.Chain, c.want) {
			t.Errorf("block %d: chain %+v, want %+v", c.m.Hash, m.Chain, c.want)
		}
	}
}

// TestChainCorruptOpensWithout: a flipped bit in a record's chain
// extension leaves the record indexed and served (its payload verified as
// ever), with no Chain, counted in OpenReport.BadChains; its neighbours
// keep theirs.
func TestChainCorruptOpensWithout(t *testing.T) {
	for _, at := range []int64{offChain, headerUsed + 2, offChain + 5, offChain + chainFixed + 3, offChain + chainFixed + 4*16 + 2} {
		cfg := testConfig(t, 8)
		s, _ := mustOpen(t, cfg)
		for h := uint64(1); h <= 3; h++ {
			m := chainMetaFor(h)
			m.Tokens, m.Chain.TokenIDs = 16, m.Chain.TokenIDs[:0]
			for i := range 16 {
				m.Chain.TokenIDs = append(m.Chain.TokenIDs, int64(i))
			}
			if _, _, err := s.WriteSync(m, payloadFor(h, testPayload)); err != nil {
				t.Fatal(err)
			}
		}
		file, off, _ := s.slotLocation(2)
		mustClose(t, s)
		flipBit(t, file, off+at)

		s, rep := mustOpen(t, cfg)
		if rep.Records != 3 || rep.BadChains != 1 || rep.DroppedTotal() != 0 {
			t.Fatalf("flip at %d: report %+v", at, rep)
		}
		if m, _ := s.Meta(2); m.Chain != nil {
			t.Fatalf("flip at %d: corrupt chain announced: %+v", at, m.Chain)
		}
		for _, h := range []uint64{1, 3} {
			if m, _ := s.Meta(h); m.Chain == nil || m.Chain.HasParent != (h%2 == 1) || len(m.Chain.TokenIDs) != 16 {
				t.Fatalf("flip at %d: block %d lost its chain: %+v", at, h, m.Chain)
			}
		}
		dst := AlignedBuffer(testPayload)
		m, n, err := s.ReadSyncDigest(2, digestFor(2), dst)
		if err != nil || !bytes.Equal(dst[:n], payloadFor(2, testPayload)) || m.Hash != 2 || m.Chain != nil {
			t.Fatalf("flip at %d: read of the record: %v", at, err)
		}
		checkInv(t, s)
		mustClose(t, s)
	}
}

// oldHeader is a record's header block as the encoder wrote it before the
// chain extension: the record's fields, then zeros.
func oldHeader(r record) []byte {
	le := binary.LittleEndian
	hdr := AlignedBuffer(BlockSize)
	le.PutUint32(hdr[offMagic:], recordMagic)
	le.PutUint16(hdr[offFormat:], 2)
	le.PutUint16(hdr[offScheme:], 1)
	le.PutUint64(hdr[offFingerprint:], r.fingerprint)
	le.PutUint64(hdr[offNamespace:], r.meta.Namespace)
	le.PutUint64(hdr[offHash:], r.meta.Hash)
	le.PutUint64(hdr[offParent:], r.meta.Parent)
	le.PutUint64(hdr[offTokens:], uint64(r.meta.Tokens))
	le.PutUint64(hdr[offPayloadLen:], uint64(r.payloadLen))
	le.PutUint64(hdr[offSlotBytes:], uint64(r.slotBytes))
	le.PutUint64(hdr[offPayloadSum:], r.payloadSum)
	le.PutUint64(hdr[offGeneration:], r.generation)
	copy(hdr[offDigest:], r.meta.Digest[:])
	le.PutUint64(hdr[offHeaderSum:], xxhash.Sum64(hdr[:offHeaderSum]))
	return hdr
}

// TestChainOldRecordOpens: a record written before the chain extension
// (its header zero past the record's fields) opens, with no Chain and
// nothing counted, and is served.
func TestChainOldRecordOpens(t *testing.T) {
	cfg := testConfig(t, 8)
	s, _ := mustOpen(t, cfg)
	m := chainMetaFor(5)
	if _, _, err := s.WriteSync(m, payloadFor(5, testPayload)); err != nil {
		t.Fatal(err)
	}
	file, off, _ := s.slotLocation(5)
	mustClose(t, s)
	// Rewrite the header as older code did: same record, no extension.
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, BlockSize)
	if _, err := f.ReadAt(hdr, off); err != nil {
		t.Fatal(err)
	}
	var r record
	if st := decodeHeader(hdr, &r); st != headerValid {
		t.Fatalf("status %d", st)
	}
	old := oldHeader(r)
	if !bytes.Equal(old[:headerUsed], hdr[:headerUsed]) {
		t.Fatal("the extension changed the record's own bytes: older code would not read it")
	}
	if bytes.Equal(old, hdr) {
		t.Fatal("no extension was written")
	}
	if _, err := f.WriteAt(old, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	s, rep := mustOpen(t, cfg)
	defer mustClose(t, s)
	if rep.Records != 1 || rep.BadChains != 0 || rep.DroppedTotal() != 0 {
		t.Fatalf("report %+v", rep)
	}
	got, ok := s.Meta(5)
	if want := m.recorded(); !ok || got != want {
		t.Fatalf("meta %+v, want %+v", got, want)
	}
	dst := AlignedBuffer(testPayload)
	if _, n, err := s.ReadSyncDigest(5, digestFor(5), dst); err != nil || !bytes.Equal(dst[:n], payloadFor(5, testPayload)) {
		t.Fatalf("read: %v", err)
	}
}

// FuzzChainRoundTrip encodes a record with an arbitrary chain: it must
// decode to the same chain (token ids left out only when they do not fit,
// the whole extension only when the LoRA name does not), leave the
// record's own bytes as they are without it, and any one bit flipped in
// the extension must make it corrupt, never another chain.
func FuzzChainRoundTrip(f *testing.F) {
	f.Add(true, "sql-adapter", []byte{1, 2, 3, 4, 5, 6, 7, 8}, false, uint16(3))
	f.Add(false, "", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, true, uint16(70))
	f.Fuzz(func(t *testing.T, hasParent bool, lora string, raw []byte, wide bool, bit uint16) {
		ids := make([]int64, len(raw)/2)
		for i := range ids {
			ids[i] = int64(binary.LittleEndian.Uint16(raw[2*i:]))
			if wide && i == 0 {
				ids[i] = -ids[i] - 1
			}
		}
		r := seedRecord()
		r.meta.Tokens = len(ids)
		r.meta.Chain = &Chain{HasParent: hasParent, TokenIDs: ids, LoRA: lora}
		hdr := make([]byte, BlockSize)
		encodeHeader(hdr, &r)
		plain := r
		plain.meta.Chain = nil
		if old := validHeader(plain); !bytes.Equal(old[:headerUsed], hdr[:headerUsed]) {
			t.Fatal("the chain changed the record's own bytes")
		}
		var back record
		if st := decodeHeader(hdr, &back); st != headerValid || back != plain {
			t.Fatalf("record decodes as %d %+v", st, back)
		}
		c, st := decodeChain(hdr, &back)
		room := BlockSize - offChain - chainFixed - chainSumBytes - len(lora)
		if room < 0 {
			if st != chainNone || c != nil {
				t.Fatalf("a LoRA name of %d bytes recorded: %d %+v", len(lora), st, c)
			}
			return
		}
		width := 4
		if wide && len(ids) > 0 {
			width = 8
		}
		want := &Chain{HasParent: hasParent, LoRA: lora}
		if len(ids)*width <= room {
			want.TokenIDs = ids
		}
		if st != chainValid || !sameChain(c, want) {
			t.Fatalf("decoded %d %+v, want %+v", st, c, want)
		}
		end := offChain + chainFixed + len(lora) + len(want.TokenIDs)*width + chainSumBytes
		at := offChain*8 + int(bit)%((end-offChain)*8)
		hdr[at/8] ^= 1 << (at % 8)
		if c, st := decodeChain(hdr, &back); st != chainCorrupt || c != nil {
			t.Fatalf("bit %d flipped: %d %+v", at, st, c)
		}
	})
}
