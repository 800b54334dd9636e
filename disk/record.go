package disk

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// Record header layout. Each slot starts with one BlockSize header block;
// the fields below sit at its front, little-endian, and the rest of the
// block is zero. The header checksum is xxh64 over bytes [0, offHeaderSum).
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

// decodeHeader parses hdr into r. Only headerValid fills r.
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

// Checksum is the payload checksum the store records and verifies: xxh64
// of the whole payload.
func Checksum(payload []byte) uint64 { return xxhash.Sum64(payload) }
