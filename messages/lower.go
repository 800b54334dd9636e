package messages

import "time"

// The lower-tier protocol: how the host (pinned) tier talks to every tier
// below it. The disk actor, the remote (Redis) actor and the fan-out actor
// that drives both speak it, and a tier added later speaks it too:
//
//	pinned -> lower -> pinned: LowerWrite / LowerWriteDone  (drain pinned slots down)
//	                           LowerRead / LowerReadDone    (fill pinned slots from below)
//	Manager -> lower:          LowerQuery, Flush, StatsRequest
//	lower -> index:            IndexUpdate{Tier: its tier}
//
// Host memory is the staging area of every tier below it: a block goes down
// and comes up through a pinned slot. So a lower tier never owns KV memory
// that another actor copies into; it reads or fills the slots it is handed.
// The GPU's own conversation with the pinned tier (OffloadRequest/Grant/Done,
// FetchRequest/Grant/Release) is the other side of that staging area: there
// the GPU's copy engine moves the bytes, into and out of slots the pinned
// tier grants.
//
// The pinned actor sends LowerWrite and LowerRead with ctx.Request, so the
// lower actor answers the Sender. Both carry pinned slot memory: the lower
// actor uses it only until it sends the matching Done message, after which
// the pinned actor owns the slots again.

// LowerWriteItem is one pinned block to write down.
type LowerWriteItem struct {
	Hash, Parent, Namespace uint64
	Tokens                  int
	// HasParent, TokenIDs and LoRA are, with Parent, the block's chain
	// (messages.BlockChain) as the GPU gave it (TokenIDs nil: not known):
	// metadata a tier may record for KV events, never verified, never
	// used to serve. TokenIDs are read-only.
	HasParent bool
	TokenIDs  []int64
	LoRA      string
	// Class is the chain's Class (messages.BlockChain.Class: the class of
	// the request whose commit first published the block, 0 unknown), for
	// the tier's eviction policy (policy.Hint.Class); metadata, never
	// stored with the block.
	Class uint8
	// Digest is the block's prefix digest (SHA-256 chain over the
	// namespace and every token of the prefix), stored with the block; a
	// later LowerReadItem must name the same digest to be served it. Zero
	// for a writer that computes none.
	Digest [32]byte
	// Slot is the pinned slot holding the block; it comes back in
	// LowerWriteDone.Slots.
	Slot int
	// Bytes is the block's payload: the pinned slot's memory, page
	// aligned. The lower actor (or its workers) reads it until
	// LowerWriteDone is sent and never writes it.
	Bytes []byte
}

// LowerWrite asks a lower tier to store blocks. Items over its in-flight
// write quota, or with no room it may evict, are denied (counted in
// TierStats.Denied), never queued; items it already holds are skipped.
// Sent with ctx.Request; answered with exactly one LowerWriteDone.
type LowerWrite struct {
	Items []LowerWriteItem
}

// LowerWriteDone answers one LowerWrite once every item of it has finished.
// Slots lists the Slot of every item, whether it was written, skipped,
// denied or failed: the lower actor no longer reads any of them and the
// pinned actor may reuse them. Written lists the hashes that were published
// on the tier and announced to the index with IndexUpdate for that tier, so
// that a later removal reaches the writer as BelowGone; a block that landed
// and left again before the answer is not listed.
//
// From names the tier that answers (the disk actor Disk, the remote actor
// Remote; the fan-out over both names the tiers it asked), so that an
// actor asking several tiers can tell their answers apart.
type LowerWriteDone struct {
	Slots   []int
	Written []uint64
	From    Tier
}

// LowerReadItem is one block to read from a lower tier into a pinned slot.
type LowerReadItem struct {
	Hash uint64
	// Digest is the prefix digest the reader expects (see
	// LowerWriteItem.Digest). A block stored with another digest is a miss,
	// never served, and is counted in TierStats.Failed and
	// Extra["verify_mismatch"]. Zero matches a block stored with zero.
	Digest [32]byte
	// Slot is the pinned slot being filled; the lower actor does not
	// interpret it.
	Slot int
	// Bytes is the slot's memory (a Filling slot, len = payload size). The
	// lower actor writes it only before it sends LowerReadDone (the disk
	// actor from its own goroutine); never afterwards, even for reads that finish
	// after the deadline.
	Bytes []byte
}

// LowerRead asks a lower tier to fill pinned slots before Deadline (the zero
// time means no deadline). On the disk, concurrent reads of one hash, within
// one LowerRead or across several, share one I/O. Sent with
// ctx.Request; answered with exactly one LowerReadDone.
type LowerRead struct {
	ID       uint64
	Items    []LowerReadItem
	Deadline time.Time
}

// LowerReadDone answers one LowerRead once every item is done or its deadline
// has passed. OK[i] says whether Items[i].Bytes now holds the block's
// verified payload; false means a miss (not held, corrupt, I/O error, past
// the deadline, digest mismatch) and the slot's bytes are unspecified. From
// this message on the pinned actor owns every slot of the request again.
// From names the tier that answers, as in LowerWriteDone. Kept, when set
// (by the fan-out over the disk and the remote tier), says per item
// whether the tier it was read from keeps it on this node: a block the
// disk lacked and the remote tier served is not, and pinned memory drains
// it to the disk when it leaves, as it does a block only the remote tier
// took. nil: every block read is kept below. Why, when set, says per item
// why it missed (MissNone where OK): MissEvicted (not held),
// MissMismatch (held under the hash with another digest), MissFailed (an
// I/O error, a corrupt record, a bad request, the tier out of service),
// MissLate (past the deadline). nil: every miss is MissFailed.
type LowerReadDone struct {
	ID   uint64
	OK   []bool
	From Tier
	Kept []bool
	Why  []MissReason
}

// LowerQuery asks a lower tier about hashes; the disk actor answers it (the
// remote tier does not: Redis evicts and expires on its own). QueryExists sets
// QueryResult.Tokens.Of(Disk) to the length, in blocks, of the leading run of
// Hashes on disk (the Manager converts blocks to tokens). QueryDelete removes
// every listed hash from disk and the index and sets QueryResult.Deleted.
// Other kinds answer with Err set. Reply needs room for one answer.
type LowerQuery struct {
	Kind   QueryKind
	Hashes []uint64
	// Digests, parallel to Hashes, are the prefix digests the blocks must
	// carry: a record stored under the hash with another digest (another
	// prefix, namespace or model) is neither counted nor removed.
	Digests [][32]byte
	Reply   chan *QueryResult
}
