package disk

import (
	"encoding/binary"
	"math"

	"github.com/cespare/xxhash/v2"
)

// Record header layout. Each slot starts with one BlockSize header block;
// the fields below sit at its front, little-endian, and the rest of the
// block is zero but for the optional chain extension (see below). The
// header checksum is xxh64 over bytes [0, offHeaderSum).
const (
	recordMagic uint32 = 0x4b565444 // "DTVK" on disk: kvtier disk
	// FormatVersion is the on-disk record layout version. Version 2 added
	// the 32-byte prefix digest; Open drops records of other versions
	// (DropVersion).
	FormatVersion uint16 = 2
	// HashSchemeVersion names how block hashes and payload checksums are
	// computed (xxh64, chained block hashes). Records with another value
	// are dropped at Open.
	HashSchemeVersion uint16 = 1

	offMagic       = 0   // uint32
	offFormat      = 4   // uint16
	offScheme      = 6   // uint16
	offFingerprint = 8   // uint64
	offNamespace   = 16  // uint64
	offHash        = 24  // uint64
	offParent      = 32  // uint64
	offTokens      = 40  // uint64
	offPayloadLen  = 48  // uint64
	offSlotBytes   = 56  // uint64: slot geometry the record was written with
	offPayloadSum  = 64  // uint64
	offGeneration  = 72  // uint64
	offDigest      = 80  // [32]byte: Meta.Digest
	offHeaderSum   = 112 // uint64
	headerUsed     = 120
)

// The chain extension: a block's place in its chain (Meta.Chain), for the
// KV events a reopened store announces, in the header block's unused space.
// It is optional and checked apart from the record: the header checksum
// above does not cover it, so code that knows nothing of it (format 2 as
// first written) opens these records as before and ignores the bytes, and
// a record with no extension (written by that code) opens here with no
// Chain. FormatVersion therefore stays 2: the record's layout, and what
// verifies it, did not change; only zero bytes became optional metadata.
// Its own checksum is xxh64 over the record's used bytes [0, headerUsed)
// and the extension up to the checksum, so an extension left from a
// record this one's write tore over never passes as this record's. A bad
// extension never fails the record (whose payload is verified as ever on
// read): the record opens with no Chain, counted in OpenReport.BadChains.
//
//	offset            size  field
//	offChain          4     chainMagic
//	offChain+4        1     chainVersion
//	offChain+5        1     flags: chainHasParent, chainTokens, chainWide
//	offChain+6        2     LoRA name length, n
//	offChain+8        2     token ids, t (0 without chainTokens)
//	offChain+10       6     zero
//	offChain+16       n     LoRA name bytes
//	...               4t|8t token ids, uint32 each, or int64 with chainWide
//	...               8     checksum
//
// Token ids are 4 bytes each when every one is in [0, 2^32), as any
// vocabulary's are, and 8 otherwise. The extension must end within the
// block: a block whose token ids do not fit (over 986 ids of 4 bytes, less
// the LoRA name's length) is recorded without them (no chainTokens) and
// one whose LoRA name alone does not fit has no extension.
const (
	chainMagic   uint32 = 0x48435648 // "HVCH" on disk: kvtier chain
	chainVersion uint8  = 1

	offChain      = 128
	chainFixed    = 16 // magic, version, flags, lengths, padding
	chainSumBytes = 8

	chainHasParent = 1 << 0 // Meta.Parent is the block's parent (none otherwise)
	chainTokens    = 1 << 1 // the token ids are recorded
	chainWide      = 1 << 2 // token ids are 8 bytes each
)

// chainStatus is the outcome of decoding the chain extension.
type chainStatus int

const (
	chainNone    chainStatus = iota + 1 // no extension: older code wrote it, or it did not fit
	chainValid                          // decoded into a Chain
	chainCorrupt                        // an extension whose checksum or fields do not hold
)

// encodeChain writes c after the record's used bytes in hdr (encodeHeader
// has written them, and zeroed the rest); nothing when c is nil or its
// LoRA name does not fit.
func encodeChain(hdr []byte, c *Chain, tokens int) {
	if c == nil {
		return
	}
	room := BlockSize - offChain - chainFixed - chainSumBytes - len(c.LoRA)
	if room < 0 {
		return
	}
	flags := uint8(0)
	if c.HasParent {
		flags |= chainHasParent
	}
	width := 4
	for _, t := range c.TokenIDs {
		if t < 0 || t > math.MaxUint32 {
			width = 8
			break
		}
	}
	n := 0
	if c.TokenIDs != nil && len(c.TokenIDs) == tokens && len(c.TokenIDs)*width <= room {
		n = len(c.TokenIDs)
		flags |= chainTokens
		if width == 8 {
			flags |= chainWide
		}
	}
	le := binary.LittleEndian
	le.PutUint32(hdr[offChain:], chainMagic)
	hdr[offChain+4] = chainVersion
	hdr[offChain+5] = flags
	le.PutUint16(hdr[offChain+6:], uint16(len(c.LoRA)))
	le.PutUint16(hdr[offChain+8:], uint16(n))
	at := offChain + chainFixed
	at += copy(hdr[at:], c.LoRA)
	for _, t := range c.TokenIDs[:n] {
		if width == 4 {
			le.PutUint32(hdr[at:], uint32(t))
		} else {
			le.PutUint64(hdr[at:], uint64(t))
		}
		at += width
	}
	le.PutUint64(hdr[at:], chainSum(hdr, at))
}

// chainSum is the extension's checksum: xxh64 over the record's used bytes
// and the extension's bytes before end.
func chainSum(hdr []byte, end int) uint64 {
	d := xxhash.New()
	_, _ = d.Write(hdr[:headerUsed])
	_, _ = d.Write(hdr[offChain:end])
	return d.Sum64()
}

// decodeChain decodes the chain extension of a header block that
// decodeHeader found valid, with r its record. A Chain is returned only
// with chainValid; it owns its memory.
func decodeChain(hdr []byte, r *record) (*Chain, chainStatus) {
	le := binary.LittleEndian
	if le.Uint32(hdr[offChain:]) != chainMagic {
		// Older code leaves the rest of the block zero: anything else is
		// an extension whose magic was hit.
		if !allZero(hdr[headerUsed:BlockSize]) {
			return nil, chainCorrupt
		}
		return nil, chainNone
	}
	flags := hdr[offChain+5]
	nl, nt := int(le.Uint16(hdr[offChain+6:])), int(le.Uint16(hdr[offChain+8:]))
	width := 4
	if flags&chainWide != 0 {
		width = 8
	}
	end := offChain + chainFixed + nl + nt*width
	switch {
	case hdr[offChain+4] != chainVersion,
		flags&^(chainHasParent|chainTokens|chainWide) != 0,
		flags&chainTokens == 0 && (nt != 0 || flags&chainWide != 0),
		end+chainSumBytes > BlockSize,
		le.Uint64(hdr[end:]) != chainSum(hdr, end),
		flags&chainTokens != 0 && nt != r.meta.Tokens:
		return nil, chainCorrupt
	}
	if !allZero(hdr[headerUsed:offChain]) || !allZero(hdr[offChain+10:offChain+chainFixed]) {
		return nil, chainCorrupt
	}
	at := offChain + chainFixed
	c := &Chain{HasParent: flags&chainHasParent != 0, LoRA: string(hdr[at : at+nl])}
	at += nl
	if flags&chainTokens != 0 {
		c.TokenIDs = make([]int64, nt)
		for i := range c.TokenIDs {
			if width == 4 {
				c.TokenIDs[i] = int64(le.Uint32(hdr[at:]))
			} else {
				c.TokenIDs[i] = int64(le.Uint64(hdr[at:]))
			}
			at += width
		}
	}
	return c, chainValid
}

// record is the decoded form of a header block.
type record struct {
	fingerprint uint64
	meta        Meta
	payloadLen  int64
	slotBytes   int64
	payloadSum  uint64
	generation  uint64
}

// encodeHeader writes r into hdr (len BlockSize), zeroing the rest.
func encodeHeader(hdr []byte, r *record) {
	clear(hdr[:BlockSize])
	le := binary.LittleEndian
	le.PutUint32(hdr[offMagic:], recordMagic)
	le.PutUint16(hdr[offFormat:], FormatVersion)
	le.PutUint16(hdr[offScheme:], HashSchemeVersion)
	le.PutUint64(hdr[offFingerprint:], r.fingerprint)
	le.PutUint64(hdr[offNamespace:], r.meta.Namespace)
	le.PutUint64(hdr[offHash:], r.meta.Hash)
	le.PutUint64(hdr[offParent:], r.meta.Parent)
	le.PutUint64(hdr[offTokens:], uint64(r.meta.Tokens))
	le.PutUint64(hdr[offPayloadLen:], uint64(r.payloadLen))
	le.PutUint64(hdr[offSlotBytes:], uint64(r.slotBytes))
	le.PutUint64(hdr[offPayloadSum:], r.payloadSum)
	le.PutUint64(hdr[offGeneration:], r.generation)
	copy(hdr[offDigest:offDigest+len(r.meta.Digest)], r.meta.Digest[:])
	le.PutUint64(hdr[offHeaderSum:], xxhash.Sum64(hdr[:offHeaderSum]))
	encodeChain(hdr, r.meta.Chain, r.meta.Tokens)
}

// headerStatus is the outcome of decoding a header block, before the
// store-specific checks (fingerprint, geometry) are applied.
type headerStatus int

const (
	headerValid headerStatus = iota + 1
	headerEmpty              // all-zero: a slot never written or scrubbed
	headerBadMagic
	headerBadChecksum
	headerBadVersion
)

// decodeHeader parses hdr into r. Only headerValid fills r. It leaves
// r.meta.Chain nil: the chain extension is decodeChain's (Open's only).
func decodeHeader(hdr []byte, r *record) headerStatus {
	le := binary.LittleEndian
	if le.Uint32(hdr[offMagic:]) != recordMagic {
		for _, b := range hdr[:headerUsed] {
			if b != 0 {
				return headerBadMagic
			}
		}
		return headerEmpty
	}
	if le.Uint64(hdr[offHeaderSum:]) != xxhash.Sum64(hdr[:offHeaderSum]) {
		return headerBadChecksum
	}
	if le.Uint16(hdr[offFormat:]) != FormatVersion || le.Uint16(hdr[offScheme:]) != HashSchemeVersion {
		return headerBadVersion
	}
	*r = record{
		fingerprint: le.Uint64(hdr[offFingerprint:]),
		meta: Meta{
			Namespace: le.Uint64(hdr[offNamespace:]),
			Hash:      le.Uint64(hdr[offHash:]),
			Parent:    le.Uint64(hdr[offParent:]),
			Tokens:    int(le.Uint64(hdr[offTokens:])),
			Digest:    [32]byte(hdr[offDigest : offDigest+32]),
		},
		payloadLen: int64(le.Uint64(hdr[offPayloadLen:])),
		slotBytes:  int64(le.Uint64(hdr[offSlotBytes:])),
		payloadSum: le.Uint64(hdr[offPayloadSum:]),
		generation: le.Uint64(hdr[offGeneration:]),
	}
	return headerValid
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// Checksum is the payload checksum the store records and verifies: xxh64
// of the whole payload.
func Checksum(payload []byte) uint64 { return xxhash.Sum64(payload) }
