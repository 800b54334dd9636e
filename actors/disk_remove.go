package actors

import (
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/disk"
	"github.com/kvtier/kvtier/messages"
)

// diskDeleteReq tracks one LowerQuery{Kind: QueryDelete} until the header of
// every removed block has been zeroed on disk.
type diskDeleteReq struct {
	reply   chan *messages.QueryResult
	deleted int
	pending int     // removals handed to workers, not yet completed
	errs    []error // scrubs that failed or never ran
}

// remove unpublishes every listed hash at once (they leave the index now)
// and hands the header scrubs to the workers; a hash whose write is in
// flight is removed as the write lands; the query is answered when
// the last scrub completes, and after the writes in flight that overwrite
// an evicted record of a listed hash, so a block reported deleted stays
// deleted after a crash. A scrub that fails (or such a write that left the
// record in place) leaves the block deleted in this process and sets
// QueryResult.Err.
func (a *DiskActor) remove(ctx actor.Context, m *messages.LowerQuery) {
	req := &diskDeleteReq{reply: m.Reply}
	var removed []uint64
	for i, h := range m.Hashes {
		if a.store.Overwriting(h) { // answered once those writes end (victimGone)
			a.overwritten[h] = append(a.overwritten[h], req)
			req.pending++
		}
		if a.store.StaleHolds(h) { // a header a failed write or scrub left: zeroed at Close
			req.errs = append(req.errs, fmt.Errorf("kvtier: actors: disk removal of %016x: a slot whose header could not be zeroed may still hold a record of it: %w", h, disk.ErrNotDurable))
		}
		if a.store.Contains(h) && !a.holds(h, m.Digests, i) {
			continue // another block under the same hash: not this chain's
		}
		if wm, writing := a.store.WritingMeta(h); writing { // removed as its write lands (finishWrite)
			if m.Digests != nil && (i >= len(m.Digests) || wm.Digest != m.Digests[i]) {
				continue // another chain's block under the same hash
			}
			a.doomed[h] = append(a.doomed[h], req)
			req.deleted++
			req.pending++
			continue
		}
		op, err := a.store.PlanRemove(h)
		if err != nil {
			if !errors.Is(err, disk.ErrNotFound) {
				req.errs = append(req.errs, err)
			}
			continue
		}
		removed = append(removed, h)
		req.deleted++
		req.pending++
		a.workers.submit(&diskJob{remove: op, dreqs: []*diskDeleteReq{req}})
	}
	a.forget(ctx, removed)
	if req.pending == 0 {
		a.replyDelete(req)
	}
}

// finishRemove completes one scrub and answers its query when it was the
// last.
func (a *DiskActor) finishRemove(j *diskJob) {
	err := j.err
	if j.cancelled {
		err = fmt.Errorf("kvtier: actors: disk removal of %016x: %w", j.remove.Meta().Hash, ErrDiskStopped)
	}
	a.store.CompleteRemove(j.remove, err)
	if err != nil && !j.cancelled {
		a.stats.failed++
		a.log.Warn("disk actor: removal not durable", zap.Uint64("hash", j.remove.Meta().Hash), zap.Error(err))
	}
	for _, req := range j.dreqs {
		if err != nil {
			req.errs = append(req.errs, err)
		}
		if req.pending--; req.pending == 0 {
			a.replyDelete(req)
		}
	}
}

func (a *DiskActor) replyDelete(req *diskDeleteReq) {
	res := &messages.QueryResult{Deleted: req.deleted}
	if len(req.errs) > 0 {
		res.Err = fmt.Errorf("kvtier: actors: %d disk removals may not survive a crash: %w", len(req.errs), errors.Join(req.errs...))
	}
	req.reply <- res
}

// victimGone ends, once no write in flight overwrites an evicted record of
// h any more, the deletes that waited for that; scrubbed says whether the
// write that just completed overwrote (or zeroed) the record, and if not,
// the deletes report that the removal may not survive a crash.
func (a *DiskActor) victimGone(h uint64, scrubbed bool) {
	reqs, ok := a.overwritten[h]
	if !ok {
		return
	}
	if !scrubbed {
		err := fmt.Errorf("kvtier: actors: disk removal of %016x: a write that evicted an earlier record of it did not land, the record stays until the store closes: %w", h, disk.ErrNotDurable)
		for _, req := range reqs {
			req.errs = append(req.errs, err)
		}
	}
	if a.store.Overwriting(h) {
		return // another write still overwrites one
	}
	delete(a.overwritten, h)
	for _, req := range reqs {
		if req.pending--; req.pending == 0 {
			a.replyDelete(req)
		}
	}
}

// undoom lets h's write in flight land for good: a write of the same block
// arriving after a Delete doomed it adds the block back (the delete, then
// the write), so the deletes that waited are answered now, as done, and the
// landing write stays instead of being removed under the new request.
func (a *DiskActor) undoom(h uint64, digest [32]byte) {
	reqs, ok := a.doomed[h]
	if !ok {
		return
	}
	if wm, writing := a.store.WritingMeta(h); !writing || wm.Digest != digest {
		return
	}
	delete(a.doomed, h)
	for _, req := range reqs {
		if req.pending--; req.pending == 0 {
			a.replyDelete(req)
		}
	}
}

// removeLanded ends the deletes that waited on h's write: a write that
// landed is removed and scrubbed now (it was never announced); one that
// failed left nothing to remove. It reports whether h was doomed.
func (a *DiskActor) removeLanded(h uint64, landed bool) bool {
	reqs, ok := a.doomed[h]
	if !ok {
		return false
	}
	delete(a.doomed, h)
	var op *disk.RemoveOp
	if landed {
		var err error
		if op, err = a.store.PlanRemove(h); err != nil {
			a.log.Error("disk actor: removing a landed write", zap.Uint64("hash", h), zap.Error(err))
		}
	}
	if op != nil { // one scrub answers every delete that waited
		j := &diskJob{remove: op, dreqs: reqs}
		if a.stopped { // shutting down: the workers are gone, scrub here
			j.err = op.Execute()
			a.finishRemove(j)
			return true
		}
		a.workers.submit(j)
		return true
	}
	for _, req := range reqs {
		if req.pending--; req.pending == 0 {
			a.replyDelete(req)
		}
	}
	return true
}
