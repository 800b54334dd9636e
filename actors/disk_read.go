package actors

import (
	"errors"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/disk"
	"github.com/kvtier/kvtier/gpu/tier"
	"github.com/kvtier/kvtier/messages"
)

// diskReadReq tracks one LowerRead until it is answered.
type diskReadReq struct {
	seq     uint64
	msg     *messages.LowerRead
	sender  *actor.PID
	ok      []bool
	why     []messages.MissReason // per item not ok: why (LowerReadDone.Why)
	waiting []bool                // item still waits for its read or its copy
	pending int                   // items waiting
	timer   *time.Timer
	done    bool           // answered; its Bytes must not be touched again
	jobs    []*diskReadJob // per item: the read it waits on (nil: none)

	// mu orders a worker's copy into the items' Bytes before the answer:
	// a worker copies only while !answered, under mu, and the actor sets
	// answered under mu before it sends LowerReadDone. The actor waits on
	// mu at most for one copy in progress.
	mu       sync.Mutex
	answered bool
}

// diskCopy is a worker's job of copying one verified payload into the
// slots of the waiters whose requests are still unanswered.
type diskCopy struct {
	src     []byte
	waiters []diskWaiter
	copied  []bool // set by the worker: waiters[i]'s slot holds the payload
}

// run copies src into every waiter's slot whose request is unanswered.
// It runs on a worker.
func (c *diskCopy) run() {
	c.copied = make([]bool, len(c.waiters))
	for i, w := range c.waiters {
		w.req.mu.Lock()
		if !w.req.answered {
			copy(w.req.msg.Items[w.item].Bytes, c.src)
			c.copied[i] = true
		}
		w.req.mu.Unlock()
	}
}

// diskReadJob is one disk read shared by every item waiting for its hash.
type diskReadJob struct {
	op      *disk.ReadOp
	waiters []diskWaiter
	io      *diskJob // the read's job, while it may still wait in the workers' queue
}

type diskWaiter struct {
	req  *diskReadReq
	item int
}

// diskReadExpired is sent by a LowerRead's deadline timer. It names the
// request itself, not its number: numbers start again in an actor that
// restarted, and a timer of the old one must not end a new read.
type diskReadExpired struct{ req *diskReadReq }

// read plans every item of m: a miss is answered at once, a hash already
// being read joins that read, any other starts one.
func (a *DiskActor) read(ctx actor.Context, m *messages.LowerRead) {
	n := len(m.Items)
	req := &diskReadReq{seq: a.readSeq, msg: m, sender: ctx.Sender(), ok: make([]bool, n), why: make([]messages.MissReason, n),
		waiting: make([]bool, n), jobs: make([]*diskReadJob, n)}
	a.readSeq++
	a.reads[req.seq] = req
	switch {
	case a.stopped:
		a.stats.misses += uint64(n)
		req.missAll(messages.MissFailed)
		a.replyRead(ctx, req)
		return
	case !m.Deadline.IsZero() && !a.now().Before(m.Deadline):
		a.stats.timeouts += uint64(n)
		a.stats.misses += uint64(n)
		req.missAll(messages.MissLate)
		a.replyRead(ctx, req)
		return
	}
	for i, it := range m.Items {
		op, first, err := a.store.PlanRead(it.Hash, it.Digest)
		if err != nil {
			// ErrNotFound, or ErrDigestMismatch: a block of another prefix
			// under the same hash, refused before any I/O (the store counts
			// it in VerifyMismatch).
			a.stats.misses++
			req.why[i] = messages.MissEvicted
			if errors.Is(err, disk.ErrDigestMismatch) {
				a.stats.mismatches++
				req.why[i] = messages.MissMismatch
				a.log.Warn("disk actor: digest mismatch, not served", zap.Uint64("hash", it.Hash))
			} else if !errors.Is(err, disk.ErrNotFound) {
				a.stats.failed++
				req.why[i] = messages.MissFailed
				a.log.Warn("disk actor: read refused", zap.Uint64("hash", it.Hash), zap.Error(err))
			}
			continue
		}
		var job *diskReadJob
		if first {
			job = &diskReadJob{op: op}
			a.readJobs[op] = job
			job.io = &diskJob{read: op, buf: a.getBuf(), rjob: job}
			a.workers.submit(job.io)
		} else {
			if job = a.readJobs[op]; job == nil {
				panic("kvtier: actors: disk store coalesced a read the actor did not start")
			}
			a.stats.coalesced++
		}
		if len(it.Bytes) < op.Len() {
			// The read still runs (and completes) for the other waiters.
			a.stats.failed++
			a.stats.misses++
			req.why[i] = messages.MissFailed
			a.log.Error("disk actor: LowerRead item shorter than the payload",
				zap.Uint64("hash", it.Hash), zap.Int("bytes", len(it.Bytes)), zap.Int("payload", op.Len()))
			continue
		}
		job.waiters = append(job.waiters, diskWaiter{req: req, item: i})
		req.waiting[i] = true
		req.jobs[i] = job
		req.pending++
	}
	if req.pending == 0 {
		a.replyRead(ctx, req)
		return
	}
	if !m.Deadline.IsZero() {
		a.armExpiry(req, m.Deadline.Sub(a.now()))
	}
}

// armExpiry sends req's diskReadExpired after d of wall time.
func (a *DiskActor) armExpiry(req *diskReadReq, d time.Duration) {
	root, self := a.sys.Root, a.self
	req.timer = time.AfterFunc(d, func() {
		root.Send(self, &diskReadExpired{req: req})
	})
}

// finishRead completes a read in the store. A verified payload goes to a
// worker, which copies it into every waiter's slot (finishCopy answers
// them); a failed or cancelled read is a miss for every waiter at once.
func (a *DiskActor) finishRead(ctx actor.Context, j *diskJob) {
	op, job := j.read, j.rjob
	h := op.Hash()
	delete(a.readJobs, op)
	err := j.err
	why := messages.MissFailed // also a read cancelled at stop
	if j.cancelled {
		// Execute never ran: the block stays on disk, the store counts no
		// read, and no waiter gets the unread buffer.
		a.store.CompleteRead(op, disk.ErrReadCanceled)
	} else {
		a.store.CompleteRead(op, err)
		if err != nil && op.Removed() {
			// A QueryDelete's scrub raced the read: a miss, not a fault.
			why = messages.MissEvicted
			a.log.Debug("disk actor: read of a removed block failed", zap.Uint64("hash", h), zap.Error(err))
		} else if err != nil {
			a.stats.failed++ // I/O error, corrupt record or a header that differs from the index on read back
			a.log.Warn("disk actor: read failed, block dropped", zap.Uint64("hash", h), zap.Error(err))
			if !a.store.Contains(h) {
				a.forget(ctx, []uint64{h})
			}
		}
	}
	live := job.waiters[:0]
	for _, w := range job.waiters {
		if !w.req.done { // else answered at its deadline; its slots are not ours
			live = append(live, w)
		}
	}
	if err != nil || j.cancelled || len(live) == 0 {
		for _, w := range live {
			a.settle(ctx, w, false, why)
		}
		a.putBuf(j.buf)
		return
	}
	cj := &diskJob{copy: &diskCopy{src: j.buf[:op.Len()], waiters: live}, buf: j.buf}
	a.copying++
	if a.stopped {
		// The workers are gone (shutdown is draining them): deliver the
		// read here rather than lose it.
		cj.copy.run()
		a.finishCopy(ctx, cj)
		return
	}
	a.workers.submitFirst(cj)
}

// finishCopy answers the waiters of a finished copy. A copy cancelled at
// stop (still queued) runs here: the payload is verified and in memory.
func (a *DiskActor) finishCopy(ctx actor.Context, j *diskJob) {
	a.copying--
	c := j.copy
	if j.cancelled {
		c.run()
	}
	for i, w := range c.waiters {
		if w.req.done {
			continue // answered at its deadline while the copy ran
		}
		a.settle(ctx, w, c.copied[i], messages.MissEvicted) // not copied: the request was answered
	}
	a.putBuf(j.buf)
}

// settle records the outcome of one waiting item (why it missed, if it
// did) and answers its request when it was the last.
func (a *DiskActor) settle(ctx actor.Context, w diskWaiter, ok bool, why messages.MissReason) {
	req := w.req
	if ok {
		req.ok[w.item] = true
		a.stats.hits++
	} else {
		req.why[w.item] = why
		a.stats.misses++
	}
	req.waiting[w.item] = false
	req.pending--
	if req.pending == 0 {
		a.replyRead(ctx, req)
	}
}

// expire answers a request at its deadline: items still waiting report
// false and count as timeouts.
func (a *DiskActor) expire(ctx actor.Context, m *diskReadExpired) {
	req := m.req
	if a.reads[req.seq] != req {
		return // answered already, or a request of an incarnation that restarted
	}
	if now := a.now(); now.Before(req.msg.Deadline) {
		// The timer waits in wall time; on a clock that runs slower (a
		// simulator's, Config.Clock) the deadline has not come yet: wait
		// again, as the GPU tier does, so that a read ends late only once
		// the clock says so.
		a.armExpiry(req, max(req.msg.Deadline.Sub(now), tier.MinRearm))
		return
	}
	var gone []*diskReadJob
	for i, w := range req.waiting {
		if w {
			req.waiting[i] = false
			req.why[i] = messages.MissLate
			a.stats.timeouts++
			a.stats.misses++
			gone = append(gone, req.jobs[i])
		}
	}
	req.pending = 0
	a.replyRead(ctx, req)
	for _, job := range gone {
		a.dropUnwanted(ctx, job)
	}
}

// dropUnwanted cancels a read still waiting for a worker once no request
// waits for it any more (each was answered at its deadline): under load,
// late reads would otherwise keep the disk busy for nothing and make the
// reads queued behind them late too.
func (a *DiskActor) dropUnwanted(ctx actor.Context, job *diskReadJob) {
	for _, w := range job.waiters {
		if !w.req.done {
			return
		}
	}
	if job.io == nil || !a.workers.unqueue(job.io) {
		return // running or finished: it completes as it is
	}
	job.io.cancelled = true
	a.stats.cancelled++
	a.finish(ctx, job.io)
}

// replyRead sends LowerReadDone; from here on the request's Bytes belong to
// the requester again.
func (a *DiskActor) replyRead(ctx actor.Context, req *diskReadReq) {
	if req.done {
		return
	}
	req.done = true
	req.mu.Lock() // waits for a copy into this request's slots in progress
	req.answered = true
	req.mu.Unlock()
	if req.timer != nil {
		req.timer.Stop()
	}
	delete(a.reads, req.seq)
	if req.sender == nil {
		a.log.Warn("disk actor: LowerRead without a sender (use ctx.Request)", zap.Uint64("id", req.msg.ID))
		return
	}
	ctx.Send(req.sender, &messages.LowerReadDone{ID: req.msg.ID, OK: req.ok, From: messages.Disk, Why: req.why})
}

// missAll marks every item of req missed for why.
func (req *diskReadReq) missAll(why messages.MissReason) {
	for i := range req.why {
		req.why[i] = why
	}
}

// getBuf returns a private aligned buffer that holds any payload with its
// O_DIRECT padding.
func (a *DiskActor) getBuf() []byte {
	if n := len(a.bufs); n > 0 {
		b := a.bufs[n-1]
		a.bufs = a.bufs[:n-1]
		return b
	}
	return disk.AlignedBuffer(int(disk.SlotBytes(a.store.PayloadBytes()) - disk.BlockSize))
}

// putBuf keeps a buffer for reuse, up to two per worker.
func (a *DiskActor) putBuf(b []byte) {
	if len(a.bufs) < 2*a.cfg.Workers {
		a.bufs = append(a.bufs, b)
	}
}
