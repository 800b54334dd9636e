package tier

import (
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/prefixhash"
)

// fetchOp is one onboarding: blocks [first, first+len(blocks)) of a sequence.
type fetchOp struct {
	id      uint64 // its key in Tier.fetches
	w       *waiter
	first   int
	blocks  []blockpool.BlockID
	hashes  []uint64
	digests []prefixhash.Digest
	slots   []int
	late    bool
	granted bool // the bytes are below in pinned memory and the copy up is under way
	copied  bool
	// deleted: a Delete of the chain came while the load was in flight;
	// only the first keep blocks are published, the rest are a miss.
	deleted bool
	keep    int
	// belowGone, when not nil, marks the blocks whose hash a BelowGone
	// named while they loaded: the copy they come from may be gone from
	// pinned memory already, so they land not held below.
	belowGone []bool
	timed     bool // a deadline timer is armed
	deadline  time.Time
	// askBy is the deadline the tiers below are given (lowerDeadline):
	// they answer by then with the leading blocks they have read; sentAt
	// is when the request went to them (a queue may hold it past askBy),
	// copyAt when the copy up of what they granted was enqueued.
	askBy, sentAt, copyAt time.Time

	// A load under a deadline is split after the leading run pinned memory
	// holds (see allocate): prev is the part before this one, next the part
	// after. A part publishes its blocks only once prev has published all of
	// its own — what a sequence holds valid is a leading run — and is given
	// up when prev falls short.
	prev, next *fetchOp
	want       int                 // blocks asked for
	settled    bool                // its share of the waiter is done (fetchDone)
	full       bool                // it published all want blocks
	waiting    bool                // copied up, waiting for prev to settle before it publishes
	why        messages.MissReason // why it fell short (missFrom), for the parts after it
}

// pastDeadline says whether op's deadline has passed on the tier's clock.
// Timers end most late loads; a grant judged past it starts no copy, which
// catches loads whose answer beats the timer on a clock that runs apart
// from the wall clock (Config.Clock). A copy under way is not judged again:
// it ends as a hit, or failed, or late by its timer.
func (t *Tier) pastDeadline(op *fetchOp) bool { return op.timed && !t.now.Before(op.deadline) }

// fetchGranted copies the granted leading run up; the rest of the op missed.
func (t *Tier) fetchGranted(g *messages.FetchGrant) {
	op, ok := t.fetches[g.ID]
	if ok && g.Short == messages.MissLate && !g.StartedLate && !op.askBy.IsZero() && !op.sentAt.IsZero() && !op.sentAt.After(op.askBy) {
		// A read cut at askBy. One sent after it (held in the serial queue
		// or behind a write-down), or that the pinned tier began only after
		// it (waiting for slots), was refused whole: its answer says nothing
		// of the lag, as TCP takes no sample from a retransmitted segment
		// (Karn).
		t.noteAnswerLag(t.now.Sub(op.askBy))
	}
	if ok && t.pastDeadline(op) {
		t.fetchLate(g.ID)
	}
	if !ok || op.late {
		// The load already timed out: give the references straight back.
		t.toPinned(&messages.FetchRelease{Slots: g.Slots})
		if ok {
			for _, id := range op.blocks {
				t.pool.Unpin(id)
			}
			t.endFetch(op)
		}
		return
	}
	op.slots, op.granted = g.Slots, true
	if n := len(g.Slots); n < len(op.blocks) {
		t.missFrom(op, n, g.Short)
	}
	if len(g.Slots) == 0 {
		t.endFetch(op)
		t.fetchDone(op)
		return
	}
	ops := make([]gpu.CopyOp, len(g.Slots))
	for i := range ops {
		ops[i] = gpu.CopyOp{Block: int(op.blocks[i]), Host: g.Bytes[i]}
	}
	op.copyAt = t.now
	// Behind the work still writing or reading the blocks for sequences
	// that held them before (freed, their pass enqueued and committed
	// behind a fence).
	t.copy(g.ID, true, gpu.H2D, ops, t.readersToo(t.pendingFences(op.blocks[:len(ops)]), op.blocks[:len(ops)]))
}

// lowerDeadline is the deadline the tiers below are given for a part of a
// load due at deadline, want blocks from tiers from: earlier than deadline
// by the time their answer takes to arrive (answerLag) and the copy up of
// want blocks is expected to take (copyUpPerBlock), both measured, but by
// at most half of the time left. At their deadline
// the tiers below answer with the leading blocks they have read (a disk
// read ends there, Short MissLate), and those are then copied up before the
// load's own deadline and count, where a read answered at the deadline
// itself would come too late for any copy. A part pinned memory holds all
// of is answered at once: it keeps deadline.
func (t *Tier) lowerDeadline(deadline time.Time, want int, from []messages.Tier) time.Time {
	if !slices.ContainsFunc(from, func(x messages.Tier) bool { return x != messages.Pinned }) {
		return deadline
	}
	reserve := t.answerLag() + time.Duration(want)*t.copyUpPerBlock()
	if left := deadline.Sub(t.now); reserve > left/2 {
		reserve = max(left/2, 0)
	}
	return deadline.Add(-reserve)
}

// noteAnswerLag folds lag, how long after the deadline the tiers below were
// given (askBy) their answer to a read cut there arrived, into answerLag:
// the messages from the tier that cut the read through pinned memory to
// the GPU, the timer that cut it firing late, and the work queued before
// them in each actor's mailbox. As TCP estimates its retransmission
// timeout (RFC 6298: smoothed mean, gain 1/8, and mean deviation, gain
// 1/4, first sample s giving s and s/2), answerLag is the mean plus four
// deviations: a lag a little longer than usual still leaves time for the
// copy.
func (t *Tier) noteAnswerLag(lag time.Duration) {
	lag = max(lag, 0)
	if !t.answerLagTimed {
		t.lagMean, t.lagDev, t.answerLagTimed = lag, lag/2, true
	} else {
		d := lag - t.lagMean
		t.lagDev += (max(d, -d) - t.lagDev) / 4
		t.lagMean += d / 8
	}
}

// answerLag is how long to allow a cut read's answer: the mean lag plus
// four mean deviations.
func (t *Tier) answerLag() time.Duration { return t.lagMean + 4*t.lagDev }

// copyUpPerBlock is the time a block's copy up from pinned memory takes,
// measured (noteCopyUp; 0 before any): loads ask the tiers below to answer
// that much before their deadline for each block (lowerDeadline).
func (t *Tier) copyUpPerBlock() time.Duration {
	if t.copyUpBlocks == 0 {
		return 0
	}
	return time.Duration(t.copyUpTime / t.copyUpBlocks)
}

// noteCopyUp folds the time op's copy up of n blocks took on the stream
// into copyUpPerBlock: from when it was enqueued, or when the copy before
// it on the stream ended if that was later (copies end in order; the wait
// behind them is not this copy's), to its end on the tier's clock. The
// estimate is the ratio of moving averages (weight 1/4 for the newest) of
// those times and of the blocks copied: the stream's time a block, its
// fixed cost a copy spread over the blocks of a typical copy.
func (t *Tier) noteCopyUp(op *fetchOp, streamFree time.Time) {
	n := float64(len(op.slots))
	if n == 0 || op.copyAt.IsZero() {
		return
	}
	took := float64(max(t.now.Sub(later(op.copyAt, streamFree)), 0))
	if t.copyUpBlocks == 0 {
		t.copyUpTime, t.copyUpBlocks = took, n
	} else {
		t.copyUpTime += (took - t.copyUpTime) / 4
		t.copyUpBlocks += (n - t.copyUpBlocks) / 4
	}
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// missFrom gives up on op's blocks from index n on, for reason why: they stay
// the sequence's, unfindable, to be recomputed. Every block given up is
// counted under its reason, in the outcome and in the tier's stats.
func (t *Tier) missFrom(op *fetchOp, n int, why messages.MissReason) {
	for _, id := range op.blocks[n:] {
		t.pool.Unpin(id)
	}
	t.countMiss(op, len(op.blocks)-n, why)
	op.blocks, op.hashes, op.digests = op.blocks[:n], op.hashes[:n], op.digests[:n]
}

// countMiss counts lost blocks of op under why, in its outcome and the
// tier's stats, and remembers the first reason op fell short.
func (t *Tier) countMiss(op *fetchOp, lost int, why messages.MissReason) {
	if op.why == messages.MissNone {
		op.why = why
	}
	t.demandShort(op.w, (op.first+len(op.blocks)-lost)*t.bs)
	switch why {
	case messages.MissMismatch:
		op.w.out.Mismatch += lost
		t.stats.Mismatches += uint64(lost)
	case messages.MissLate:
		op.w.out.Late += lost
		t.stats.Timeouts += uint64(lost)
	case messages.MissFailed:
		op.w.out.Failed += lost
		t.stats.Failed += uint64(lost)
	default: // evicted between the lookup and the fetch, or not said
		op.w.out.Evicted += lost
	}
}

func (t *Tier) fetchCopied(id uint64, err error, streamFree time.Time) {
	op, ok := t.fetches[id]
	if !ok {
		t.cfg.Log.Error("gpu tier: copy done for an unknown fetch", zap.Uint64("id", id))
		return
	}
	t.toPinned(&messages.FetchRelease{Slots: op.slots})
	op.copied = true
	if err == nil {
		t.noteCopyUp(op, streamFree)
	}
	if op.late {
		// The sequence moved on to fresh blocks; the late copy's blocks go back.
		for _, id := range op.blocks {
			t.pool.Unpin(id)
		}
		t.endFetch(op)
		return
	}
	if err != nil {
		t.cfg.Log.Warn("gpu tier: onboard copy failed", zap.Error(err))
		t.missFrom(op, 0, messages.MissFailed)
	} else if p := op.prev; p != nil && !p.settled {
		// Its bytes are here before those of the blocks ahead of it: they
		// stay pinned, unpublished, until the part before settles.
		op.waiting = true
		return
	} else {
		t.publishFetch(op)
	}
	t.endFetch(op)
	t.fetchDone(op)
}

// publishFetch makes a copied load's blocks findable and valid for its
// sequence, unless the part before it fell short (then they are given up:
// the sequence recomputes from there).
func (t *Tier) publishFetch(op *fetchOp) {
	if p := op.prev; p != nil && !p.full {
		t.missFrom(op, 0, p.why)
		return
	}
	if op.deleted && op.keep < len(op.blocks) {
		t.missFrom(op, op.keep, messages.MissEvicted)
	}
	// The bytes arrived from a record whose digest matched: the blocks
	// hold computed KV of this prefix, so they are committed.
	for i, id := range op.blocks {
		t.pool.Recache(id)
		if op.belowGone == nil || !op.belowGone[i] {
			t.flags[id] |= flagBelow
		}
		t.pool.Unpin(id)
	}
	t.stats.Onboarded += uint64(len(op.blocks))
	t.demandLanded(op.w, op.first, op.first+len(op.blocks))
	op.full = len(op.blocks) == op.want
	op.w.out.ValidTokens = (op.first + len(op.blocks)) * t.bs
	if table, terr := t.pool.Table(t.scratch[:0], op.w.seq); terr == nil && len(op.blocks) > 0 {
		last := op.first + len(op.blocks) - 1
		if last < len(table) && table[last] == op.blocks[len(op.blocks)-1] {
			_, _ = t.pool.Commit(op.w.seq, op.w.out.ValidTokens, nil)
		}
		t.scratch = table
	}
}

// fetchDone ends op's share of its allocation's waiter, then settles the
// part after it, which may have waited for it.
func (t *Tier) fetchDone(op *fetchOp) {
	op.settled = true
	op.w.done(t)
	if n := op.next; n != nil && !n.settled {
		t.settleNext(n)
	}
}

// settleNext decides what the part before n settling means for n: a part
// copied up and waiting publishes now, or is given up when the part before
// fell short; a part not yet granted is given up at once then (its grant,
// when it comes, goes back); one being copied up is judged when its copy
// ends, unless its own deadline ends it first (fresh blocks, or Overdue).
func (t *Tier) settleNext(n *fetchOp) {
	switch {
	case n.waiting:
		n.waiting = false
		t.publishFetch(n)
		t.endFetch(n)
		t.fetchDone(n)
	case n.prev.full || n.granted:
	default:
		n.late = true
		t.missFrom(n, 0, n.prev.why)
		t.fetchDone(n)
	}
}

// fetchLate turns a load that missed its deadline into a miss, and completes
// its allocation's Ready now rather than when the bytes come (for one part
// of a split load: its share of the waiter).
//
// Before the grant no copy writes the load's blocks, and none will (a grant
// that comes later is given back): the sequence keeps them, to recompute
// into. Once the copy up is under way the blocks are the copy's until it
// ends, so the sequence gets fresh blocks instead, while the copy finishes
// into the old ones; with too few free blocks for that, the load finishes
// late (as hits, or failed if the copy fails, or as a miss when it is the
// later part of a split load whose earlier part fell short), and its
// blocks count in TierStats.Overdue at once.
// A load whose sequence no longer holds its blocks (freed, or its id taken
// by a new allocation) is late with no fresh blocks and no table: they
// would be someone else's.
func (t *Tier) fetchLate(id uint64) {
	op, ok := t.fetches[id]
	if !ok || op.copied || op.late {
		return
	}
	if !op.granted {
		op.late = true
		t.missFrom(op, 0, messages.MissLate)
		t.fetchDone(op)
		return
	}
	table, err := t.pool.Table(nil, op.w.seq)
	var held []int // indexes into op.blocks of the blocks the sequence still holds
	if err == nil {
		for i, old := range op.blocks {
			if op.first+i < len(table) && table[op.first+i] == old {
				held = append(held, i)
			}
		}
	}
	if len(held) == 0 {
		// Nobody waits on these blocks: Ready completes late, and the copy
		// lands into blocks that go back uncached.
		op.late = true
		t.countMiss(op, len(op.blocks), messages.MissLate)
		t.fetchDone(op)
		return
	}
	if t.pool.NumFree() < len(held) {
		t.stats.Overdue += uint64(len(op.blocks))
		t.cfg.Log.Debug("gpu tier: a load past its deadline finishes late: too few free blocks to swap in",
			zap.Uint64("id", id), zap.Int("blocks", len(op.blocks)), zap.Int("free", t.pool.NumFree()))
		return
	}
	op.late = true
	var fresh []blockpool.BlockID
	for _, i := range held {
		if nid, err := t.pool.Detach(op.w.seq, op.first+i); err == nil {
			table[op.first+i] = nid
			fresh = append(fresh, nid)
		}
	}
	op.w.out.Blocks = table
	t.countMiss(op, len(op.blocks), messages.MissLate)
	// The fresh blocks may have evicted cached contents. Writing them down
	// first would hold Ready past the deadline (their copy down queues
	// behind the late copy up on the stream), so they are dropped instead:
	// a cache may lose what it holds, never serve late.
	t.dropEvicted()
	t.resetBlocks(fresh)
	t.fetchDone(op)
}

// Deadline reports that the timer of load id fired. The timer waits in
// wall time; on a Config.Clock that runs slower, the tier's clock may still
// be short of the deadline, and the load is judged by the tier's clock: the
// timer is armed again for what is left.
func (t *Tier) deadline(id uint64) {
	if op, ok := t.fetches[id]; ok && op.timed && t.now.Before(op.deadline) {
		t.out.Timers = append(t.out.Timers, Timer{ID: id, At: op.deadline, Again: true})
		return
	}
	t.fetchLate(id)
}

func (t *Tier) endFetch(op *fetchOp) {
	if op.timed {
		t.out.CancelTimers = append(t.out.CancelTimers, op.id)
	}
	delete(t.fetches, op.id)
	t.maybeFlushed()
}
