package messages

import "time"

// Disk tier flows (pinned actor <-> disk actor):
//
//	pinned -> disk -> pinned: DiskWrite / DiskWriteDone   (drain pinned slots to disk)
//	                          DiskRead / DiskReadDone     (fill pinned slots from disk)
//	Manager -> disk:          DiskQuery, Flush, StatsRequest
//	disk -> index:            IndexUpdate{Tier: Disk}
//
// The pinned actor sends DiskWrite and DiskRead with ctx.Request, so the disk
// actor answers the Sender. Both carry pinned slot memory: the disk actor
// uses it only until it sends the matching Done message, after which the
// pinned actor owns the slots again.

// DiskWriteItem is one pinned block to write to disk.
type DiskWriteItem struct {
	Hash, Parent, Namespace uint64
	Tokens                  int
	// Digest is the block's prefix digest (SHA-256 chain over the
	// namespace and every token of the prefix), stored with the block; a
	// later DiskReadItem must name the same digest to be served it. Zero
	// for a writer that computes none.
	Digest [32]byte
	// Slot is the pinned slot holding the block; it comes back in
	// DiskWriteDone.Slots.
	Slot int
	// Bytes is the block's payload: the pinned slot's memory, page
	// aligned. The disk actor's workers read it until DiskWriteDone is
	// sent and never write it.
	Bytes []byte
}

// DiskWrite asks the disk actor to store blocks. Items over the disk actor's
// in-flight write quota, or with no evictable disk slot, are denied (counted
// in TierStats.Denied), never queued; items already on disk are skipped.
// Sent with ctx.Request; answered with exactly one DiskWriteDone.
type DiskWrite struct {
	Items []DiskWriteItem
}

// DiskWriteDone answers one DiskWrite once every item of it has finished.
// Slots lists the Slot of every item, whether it was written, skipped,
// denied or failed: the disk actor no longer reads any of them and the
// pinned actor may reuse them. Written lists the hashes that were published
// on disk (and announced to the index with IndexUpdate{Tier: Disk}); a
// later write may already have evicted some of them again.
type DiskWriteDone struct {
	Slots   []int
	Written []uint64
}

// DiskReadItem is one block to read from disk into a pinned slot.
type DiskReadItem struct {
	Hash uint64
	// Digest is the prefix digest the reader expects (see
	// DiskWriteItem.Digest). A block stored with another digest is a miss,
	// never served, and is counted in TierStats.Failed and
	// Extra["verify_mismatch"]. Zero matches a block stored with zero.
	Digest [32]byte
	// Slot is the pinned slot being filled; the disk actor does not
	// interpret it.
	Slot int
	// Bytes is the slot's memory (a Filling slot, len = payload size). The
	// disk actor writes it only from its own goroutine and only before it
	// sends DiskReadDone; never afterwards, even for reads that finish
	// after the deadline.
	Bytes []byte
}

// DiskRead asks the disk actor to fill pinned slots from disk before
// Deadline (the zero time means no deadline). Concurrent reads of one hash,
// within one DiskRead or across several, share one disk I/O. Sent with
// ctx.Request; answered with exactly one DiskReadDone.
type DiskRead struct {
	ID       uint64
	Items    []DiskReadItem
	Deadline time.Time
}

// DiskReadDone answers one DiskRead once every item is done or its deadline
// has passed. OK[i] says whether Items[i].Bytes now holds the block's
// verified payload; false means a miss (not on disk, corrupt, I/O error,
// past the deadline, digest mismatch) and the slot's bytes are unspecified. From this message
// on the pinned actor owns every slot of the request again.
type DiskReadDone struct {
	ID uint64
	OK []bool
}

// DiskQuery asks the disk actor about hashes. QueryExists sets
// QueryResult.DiskTokens to the length, in blocks, of the leading run of
// Hashes on disk (the Manager converts blocks to tokens). QueryDelete removes
// every listed hash from disk and the index and sets QueryResult.Deleted.
// Other kinds answer with Err set. Reply needs room for one answer.
type DiskQuery struct {
	Kind   QueryKind
	Hashes []uint64
	// Digests, parallel to Hashes, are the prefix digests the blocks must
	// carry: a record stored under the hash with another digest (another
	// prefix, namespace or model) is neither counted nor removed.
	Digests [][32]byte
	Reply   chan *QueryResult
}
