package actors

import (
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/disk"
	"github.com/kvtier/kvtier/messages"
)

// diskDeleteReq tracks one DiskQuery{Kind: QueryDelete} until the header of
// every removed block has been zeroed on disk.
type diskDeleteReq struct {
	reply   chan *messages.QueryResult
	deleted int
	pending int     // removals handed to workers, not yet completed
	errs    []error // scrubs that failed or never ran
}

// remove unpublishes every listed hash at once (they leave the index now)
// and hands the header scrubs to the workers; the query is answered when
// the last scrub completes, so a block reported deleted stays deleted after
// a crash. A scrub that fails leaves the block deleted in this process and
// sets QueryResult.Err.
func (a *DiskActor) remove(ctx actor.Context, m *messages.DiskQuery) {
	req := &diskDeleteReq{reply: m.Reply}
	var removed []uint64
	for _, h := range m.Hashes {
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
		a.workers.submit(&diskJob{remove: op, dreq: req})
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
	req := j.dreq
	if err != nil {
		req.errs = append(req.errs, err)
		if !j.cancelled {
			a.stats.failed++
			a.log.Warn("disk actor: removal not durable", zap.Uint64("hash", j.remove.Meta().Hash), zap.Error(err))
		}
	}
	req.pending--
	if req.pending == 0 {
		a.replyDelete(req)
	}
}

func (a *DiskActor) replyDelete(req *diskDeleteReq) {
	res := &messages.QueryResult{Deleted: req.deleted}
	if len(req.errs) > 0 {
		res.Err = fmt.Errorf("kvtier: actors: %d disk removals may not survive a crash: %w", len(req.errs), errors.Join(req.errs...))
	}
	req.reply <- res
}
