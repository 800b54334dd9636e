package tier

import (
	"github.com/kvtier/kvtier/blockpool"
	"time"

	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/prefixhash"
)

// Ready is what the Tier asks its executor to do after an event, in this
// order: enqueue Copies on the stream (each after its Fences), send ToPinned
// and ToIndex (with the executor as the sender, so answers come back as
// events), arm and cancel Timers, run Replies, and wait off the state
// machine for Stopped. The executor takes it with Ready and must carry it
// out in full before the next event. The Tier reuses the memory of Replies
// from the Ready after next on, and keeps no other reference to it.
type Ready struct {
	Copies   []Copy
	ToPinned []any // *messages.OffloadRequest, FetchRequest, OffloadDone, FetchRelease
	ToIndex  []any // *messages.Lookup, *messages.Demand
	// Residency, with the pool's Journal on, is what became findable on
	// the GPU or stopped being, for the KV-event publisher; then
	// ResidencyAfter removes evicted blocks whose write down just ended.
	// Both go after ToPinned: an OffloadDone there stores a block below
	// before the GPU's removal of it is reported.
	Residency, ResidencyAfter *messages.Residency
	Timers                    []Timer
	CancelTimers              []uint64 // timers of loads that ended before their deadline
	// Replies answer callers: each sends on a reply channel or completes a
	// Completion. They run after everything above.
	Replies []Reply
	Stopped []StoppedWait
}

// Reply is one answer to a caller, run by the executor.
type Reply interface{ Reply() }

// ReplyFunc is a Reply that calls the function.
type ReplyFunc func()

// Reply calls f.
func (f ReplyFunc) Reply() { f() }

// Copy is one batch of block copies. The executor reports its end with
// CopyDone(ID, Fetch, err), also when the batch could not be enqueued.
type Copy struct {
	CopyID
	Dir    gpu.Direction
	Ops    []gpu.CopyOp
	Fences []gpu.Fence // the stream waits on each (Stream.WaitFence) before the batch
}

// CopyID names a copy batch: the id of its load (Fetch) or offload.
type CopyID struct {
	ID    uint64
	Fetch bool
}

// Timer asks for Deadline(ID) at At, on the Tier's clock.
type Timer struct {
	ID uint64
	At time.Time
	// Again: the timer fired before the tier's clock reached At (a
	// Config.Clock slower than the wall clock); the executor waits at least
	// MinRearm before it fires again, so a stalled clock is not polled hot.
	Again bool
}

// MinRearm is the least wall time an executor waits on a Timer armed Again.
const MinRearm = 5 * time.Millisecond

// StoppedWait is a caller answered after Stop once the copies it waits on
// have left the stream: Complete runs then, off the state machine.
type StoppedWait struct {
	Copies   []CopyID
	Complete func()
}

// Ready returns the work the events so far asked for and clears it.
func (t *Tier) Ready() Ready {
	r := t.out
	// Replies' memory alternates between two slices: the one handed out
	// two calls ago has been carried out (and is cleared of its answers).
	spare := t.spareReplies
	clear(spare)
	t.spareReplies = r.Replies
	t.out = Ready{Replies: spare[:0]}
	t.demandMsg = nil // it is in r.ToIndex
	if j := t.pool.DrainJournal(); len(j) > 0 {
		r.Residency = &messages.Residency{Tier: messages.GPU, Changes: make([]messages.ResidencyChange, 0, len(j))}
		for _, c := range j {
			h := uint64(c.Hash)
			if !c.Stored && t.evictWrites[h] > 0 { // reported when its writes down end
				t.held[h] = true
				continue
			}
			r.Residency.Changes = append(r.Residency.Changes, residencyChange(c))
		}
		if len(r.Residency.Changes) == 0 {
			r.Residency = nil
		}
	}
	return r
}

// residencyChange is a journal entry as the event publisher takes it.
func residencyChange(c blockpool.Change) messages.ResidencyChange {
	return messages.ResidencyChange{Stored: c.Stored, Hash: uint64(c.Hash), Parent: uint64(c.Parent), HasParent: c.HasParent, Tokens: c.Tokens,
		LoRA: prefixhash.LoRAOf(c.NS)}
}

// FullResidency returns every block the GPU serves hits from, as one Full
// residency for the event publisher (nil without the pool's Journal): for
// the executor to send when changes it sent before may have been lost on
// their way (LowerGone). Call it after Ready, so that it comes after every
// change reported.
func (t *Tier) FullResidency() *messages.Residency {
	if !t.pool.Config().Journal {
		return nil
	}
	cs := t.pool.CachedChanges(nil)
	r := &messages.Residency{Tier: messages.GPU, Full: true, Changes: make([]messages.ResidencyChange, len(cs))}
	for i, c := range cs {
		r.Changes[i] = residencyChange(c)
	}
	return r
}

// HasReady reports whether Ready holds work.
func (t *Tier) HasReady() bool {
	o := &t.out
	return t.pool.JournalPending() || o.ResidencyAfter != nil || len(o.Copies)+len(o.ToPinned)+len(o.ToIndex)+len(o.Timers)+len(o.CancelTimers)+len(o.Replies)+len(o.Stopped) > 0
}

// SetNow advances the Tier's clock; deadlines are computed from it. The
// executor sets it before each event it feeds.
func (t *Tier) SetNow(now time.Time) { t.now = now }

func (t *Tier) reply(f func())   { t.out.Replies = append(t.out.Replies, ReplyFunc(f)) }
func (t *Tier) toPinned(msg any) { t.out.ToPinned = append(t.out.ToPinned, msg) }
func (t *Tier) toIndex(msg any)  { t.out.ToIndex = append(t.out.ToIndex, msg) }
func (t *Tier) timer(id uint64, at time.Time) {
	t.out.Timers = append(t.out.Timers, Timer{ID: id, At: at})
}

// copy asks for a copy batch after the fences.
func (t *Tier) copy(id uint64, fetch bool, dir gpu.Direction, ops []gpu.CopyOp, fences []gpu.Fence) {
	t.out.Copies = append(t.out.Copies, Copy{CopyID: CopyID{ID: id, Fetch: fetch}, Dir: dir, Ops: ops, Fences: fences})
}

// Events. Each is one message the Tier's actor received; the Tier decides
// and queues its work in Ready.

// AllocateBatch allocates reqs (keys computed by the caller, one per
// request) and answers through send once every request is decided.
func (t *Tier) AllocateBatch(reqs []messages.AllocRequest, keys []*blockpool.Keys, send func(*messages.AllocateBatchResult)) {
	if !t.allocateBatch(reqs, keys, false, send) {
		t.afterBatch()
	}
}

// AllocateInOrder allocates reqs as AllocateBatch does, but first come,
// first served: in order (every request waits for the batch's Lookup), and
// once one request is short of GPU blocks, with no offload about to free
// enough (it would park), the ones after it are not tried: they fail with
// an error matching blockpool.ErrNoSpace and hold nothing. A request that
// parks holds the ones after it back; when it is cancelled (its caller
// withdrew: ErrCanceled; Stop: ErrStopped), so are they.
func (t *Tier) AllocateInOrder(reqs []messages.AllocRequest, keys []*blockpool.Keys, send func(*messages.AllocateBatchResult)) {
	if !t.allocateBatch(reqs, keys, true, send) {
		t.afterBatch()
	}
}

// Step runs one scheduler step: commits, frees, appends, allocations.
func (t *Tier) Step(m *messages.StepBatch) { t.step(m) }

// CommitBatch commits what the caller computed and answers at once.
func (t *Tier) CommitBatch(items []messages.CommitItem, send func(*messages.CommitBatchResult)) {
	r := t.commitBatch(items)
	t.reply(func() { send(r) })
}

// AppendBatch appends tokens to sequences.
func (t *Tier) AppendBatch(items []messages.AppendItem, send func(*messages.AppendBatchResult)) {
	t.appendBatch(items, send)
	t.afterBatch()
}

// FreeBatch frees sequences; with swap their committed blocks go down first.
func (t *Tier) FreeBatch(seqs []uint64, swap bool, send func(*messages.FreeBatchResult)) {
	t.freeBatch(seqs, swap, send)
	t.afterBatch()
}

// Query answers an Exists or Delete for a chain.
func (t *Tier) Query(m *messages.Query) {
	r := t.query(m)
	t.reply(func() { m.Reply <- r })
}

// Flush answers on reply once every operation in flight now has finished.
func (t *Tier) Flush(reply chan error) {
	t.flushes = append(t.flushes, gpuFlush{reply: reply, upto: t.nextID})
	t.maybeFlushed()
}

// LookupDone is the prefix index's answer to a Lookup.
func (t *Tier) LookupDone(m *messages.LookupResult) { t.lookupDone(m) }

// FetchGranted is the pinned tier's answer to a FetchRequest.
func (t *Tier) FetchGranted(g *messages.FetchGrant) { t.fetchGranted(g) }

// OffloadGranted is the pinned tier's answer to an OffloadRequest.
func (t *Tier) OffloadGranted(g *messages.OffloadGrant) { t.offloadGranted(g) }

// CopyDone reports the end of a copy batch from Ready.Copies.
func (t *Tier) CopyDone(c CopyID, err error) {
	streamFree := t.lastCopyDone // when the copy before this one ended
	if err == nil {              // a copy that failed to enqueue ends at once, not in stream order
		t.lastCopyDone = t.now
	}
	if c.Fetch {
		t.fetchCopied(c.ID, err, streamFree)
	} else {
		t.offloadCopied(c.ID, err)
	}
}

// Deadline reports that the timer of a load fired.
func (t *Tier) Deadline(id uint64) { t.deadline(id) }

// CachedHashes returns the hashes of the blocks the GPU serves hits from.
func (t *Tier) CachedHashes() []uint64 {
	hs := t.pool.CachedHashes(nil)
	out := make([]uint64, len(hs))
	for i, h := range hs {
		out[i] = uint64(h)
	}
	return out
}
