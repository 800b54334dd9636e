package actors

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/disk"
	"github.com/kvtier/kvtier/messages"
)

// DefaultDiskWorkers is the number of I/O goroutines when DiskConfig.Workers
// is zero.
const DefaultDiskWorkers = 4

// DefaultDiskWriteQuota is the in-flight write limit when
// DiskConfig.WriteQuota is zero.
const DefaultDiskWriteQuota = 64

var (
	// ErrDiskConfig means NewDiskActor rejected its DiskConfig.
	ErrDiskConfig = errors.New("kvtier: actors: invalid disk config")
	// ErrDiskStopped answers requests that reach the disk actor after it
	// began to stop.
	ErrDiskStopped = fmt.Errorf("kvtier: disk tier: %w", messages.ErrStopped)
)

// DiskConfig configures the disk tier actor.
type DiskConfig struct {
	// Store is opened by the caller and owned by the actor from then on:
	// the actor is its only user and Closes it when it stops. The caller
	// must not touch it again.
	Store *disk.Store
	// Index receives IndexUpdate{Tier: messages.Disk}.
	Index *actor.PID
	// WriteQuota bounds write items in flight (planned, not yet completed);
	// an item over it is denied and counted, never queued. Zero means
	// DefaultDiskWriteQuota.
	WriteQuota int
	// Workers is the number of I/O goroutines; zero means
	// DefaultDiskWorkers.
	Workers int
	// Log receives rare events; nil means zap.NewNop().
	Log *zap.Logger
	// Clock judges read deadlines (nil: time.Now): a timer set from it
	// ends reads still running at their deadline; one that fires while the
	// clock is still short of it waits again (at least tier.MinRearm).
	Clock func() time.Time
	// Observe, when set, hears of every block written or read, from the
	// I/O worker that did it.
	Observe messages.LinkObserver

	// writeFault, set by tests, runs in the actor once the store completed
	// a write, before the actor's own books: a panic there is a bug met
	// half-way through a message.
	writeFault func(hash uint64)
}

// withDefaults validates c and returns a copy with defaults filled in.
func (c DiskConfig) withDefaults() (DiskConfig, error) {
	switch {
	case c.Store == nil:
		return c, fmt.Errorf("%w: nil Store", ErrDiskConfig)
	case c.Index == nil:
		return c, fmt.Errorf("%w: nil Index", ErrDiskConfig)
	case c.WriteQuota < 0:
		return c, fmt.Errorf("%w: WriteQuota %d must be >= 0", ErrDiskConfig, c.WriteQuota)
	case c.Workers < 0:
		return c, fmt.Errorf("%w: Workers %d must be >= 0", ErrDiskConfig, c.Workers)
	}
	if c.WriteQuota == 0 {
		c.WriteQuota = DefaultDiskWriteQuota
	}
	if c.Workers == 0 {
		c.Workers = DefaultDiskWorkers
	}
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	return c, nil
}

// DiskActor owns the disk tier: a disk.Store (slot allocation, eviction,
// the on-disk index) and the worker goroutines that run its blocking I/O.
//
// The store is a plain state machine that the actor drives from its own
// goroutine: PlanWrite/PlanRead here, Execute on a worker, CompleteWrite/
// CompleteRead here when the worker's report (a message) arrives. The actor
// never blocks on I/O or on a future, except once when it stops, where it
// waits for the I/O already handed to workers so the store can be closed.
//
// # Messages
//
//   - *messages.LowerWrite (ctx.Request) -> one *messages.LowerWriteDone.
//   - *messages.LowerRead (ctx.Request) -> one *messages.LowerReadDone.
//   - *messages.LowerQuery, *messages.Flush, *messages.StatsRequest: answered
//     on their Reply channel; a QueryDelete only once the removed blocks'
//     headers are zeroed on disk (a worker runs disk.RemoveOp), so a block
//     reported deleted does not come back after a crash.
//
// # Memory of pinned slots
//
// A write's Bytes are read in place by a worker; LowerWriteDone is sent only
// after every worker of the request reported, so the pinned actor may reuse
// the slots from then on. A read goes into a private aligned buffer owned by
// the actor; once the store has completed it, a worker copies the verified
// payload into the Bytes of every waiting item (coalesced waiters
// included), so no memcpy runs on the actor goroutine. The copy into a
// request's slots happens under that request's mutex and only while it is
// unanswered, and the actor marks it answered under the same mutex before
// sending LowerReadDone, so no byte of a pinned slot is written after it,
// even by a read that finishes past the deadline (whose answer may wait
// for one memcpy in progress).
//
// # Lifecycle
//
// On *actor.Started the actor starts its workers and publishes every record
// of the (possibly reopened) store to the index, so blocks survive restarts.
// On *actor.Stopping it waits for the I/O handed to workers, completes every
// op (queued jobs are cancelled without I/O), answers every pending request
// (unfinished items as not written / not read, flushes with ErrDiskStopped
// if any write is left) and closes the store. On *actor.Restarting it does
// the same but leaves the store open for the next incarnation.
type DiskActor struct {
	cfg   DiskConfig
	store *disk.Store
	log   *zap.Logger

	self    *actor.PID
	sys     *actor.ActorSystem
	workers *diskWorkers
	stopped bool

	// Writes.
	writeSeq       uint64
	writes         map[uint64]*diskWriteReq // pending DiskWrites by seq
	writesInFlight int                      // planned write items not completed
	// unannounced maps hashes published on disk but not yet announced to
	// the index (their LowerWrite is still pending) to that request.
	unannounced map[uint64]*diskWriteReq
	// writing maps hashes being written to the request writing them.
	writing  map[uint64]*diskWriteReq
	flushers []diskFlusher
	// doomed maps hashes deleted while their write was in flight to the
	// deletes waiting on them: the write is removed (durably) as it lands.
	doomed map[uint64][]*diskDeleteReq
	// overwritten maps hashes deleted while a write in flight overwrites
	// a slot still holding an evicted record of them (Store.Overwriting)
	// to the deletes waiting for those writes: answered before, a crash
	// would bring the record back.
	overwritten map[uint64][]*diskDeleteReq

	// Reads.
	readSeq  uint64
	reads    map[uint64]*diskReadReq // pending DiskReads by seq
	readJobs map[*disk.ReadOp]*diskReadJob
	bufs     [][]byte // free private read buffers
	copying  int      // copy jobs handed to workers, not yet finished

	reopenRecords int
	// stats outlive a restart (the producer makes them once, as the
	// store): the tier's counters are exported as Prometheus counters,
	// which never go down.
	stats *diskCounters
}

// diskCounters are the actor's own counters; the store keeps the rest.
type diskCounters struct {
	hits, misses, denied, failed, timeouts uint64
	mismatches                             uint64 // reads refused: another prefix's record under the hash
	written, skipped, coalesced, cancelled uint64
}

type diskFlusher struct {
	barrier uint64 // answered once no LowerWrite with seq < barrier is pending
	reply   chan error
}

// NewDiskActor validates cfg and returns the actor's producer. The store in
// cfg belongs to the actor from now on.
func NewDiskActor(cfg DiskConfig) (actor.Producer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	stats := &diskCounters{}
	return func() actor.Actor {
		return &DiskActor{
			stats:       stats,
			cfg:         cfg,
			store:       cfg.Store,
			log:         cfg.Log,
			writes:      make(map[uint64]*diskWriteReq),
			unannounced: make(map[uint64]*diskWriteReq),
			writing:     make(map[uint64]*diskWriteReq),
			doomed:      make(map[uint64][]*diskDeleteReq),
			overwritten: make(map[uint64][]*diskDeleteReq),
			reads:       make(map[uint64]*diskReadReq),
			readJobs:    make(map[*disk.ReadOp]*diskReadJob),
		}
	}, nil
}

// Receive implements actor.Actor.
func (a *DiskActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *diskJobDone:
		if a.workers != nil && a.workers.done(m.job) {
			a.finish(ctx, m.job)
		}
	case *diskReadExpired:
		a.expire(ctx, m)
	case *messages.LowerWrite:
		a.write(ctx, m)
	case *messages.LowerRead:
		a.read(ctx, m)
	case *messages.LowerQuery:
		a.query(ctx, m)
	case *messages.Missed:
		a.store.Miss(m.Hashes...)
	case *messages.Flush:
		a.flush(m)
	case *messages.StatsRequest:
		m.Reply <- a.snapshot()
	case *actor.Started:
		a.start(ctx)
	case *actor.Stopping, *actor.Stopped:
		a.shutdown(ctx, true /* closeStore */)
	case *actor.Restarting:
		a.shutdown(ctx, false /* closeStore */)
	default:
		a.log.Warn("disk actor: unexpected message", zap.String("type", typeName(m)))
	}
}

// start launches the workers and publishes the store's records to the index.
func (a *DiskActor) start(ctx actor.Context) {
	a.self, a.sys = ctx.Self(), ctx.ActorSystem()
	root, self := a.sys.Root, a.self
	observe := a.cfg.Observe
	a.workers = startDiskWorkers(a.cfg.Workers, func(j *diskJob) {
		if observe != nil && !j.cancelled && (j.write != nil || j.read != nil) {
			link, bytes := messages.LinkHostToDisk, int64(len(j.payload))
			if j.write == nil {
				link, bytes = messages.LinkDiskToHost, int64(j.read.Len())
			}
			blocks := 1
			if j.err != nil { // a failed I/O moved nothing
				blocks, bytes = 0, 0
			}
			observe(link, blocks, bytes, j.took, j.err == nil)
		}
		root.Send(self, &diskJobDone{job: j})
	})
	var metas []disk.Meta
	a.store.Range(func(m disk.Meta) bool {
		metas = append(metas, m)
		return true
	})
	// With the chains the records kept, for the event publisher to announce
	// them as the GPU did.
	hashes, chains := reopened(metas)
	a.store.ReleaseChains() // the message owns them now
	a.reopenRecords = len(hashes)
	if len(hashes) > 0 {
		ctx.Send(a.cfg.Index, &messages.IndexUpdate{Tier: messages.Disk, Added: hashes, Chains: chains})
	}
	a.log.Info("disk actor: started", zap.Int("records", len(hashes)),
		zap.Stringer("mode", a.store.Mode()), zap.Int("workers", a.cfg.Workers))
}

// finish completes a job in the store, on the actor goroutine.
func (a *DiskActor) finish(ctx actor.Context, j *diskJob) {
	switch {
	case j.write != nil:
		a.finishWrite(ctx, j)
	case j.remove != nil:
		a.finishRemove(j)
	case j.copy != nil:
		a.finishCopy(ctx, j)
	default:
		a.finishRead(ctx, j)
	}
}

// forget handles hashes that left the disk: those not yet announced to the
// index are dropped from their pending announcement, the rest are sent as
// one IndexUpdate Remove. This keeps Added and Remove for a hash in order.
// A block another prefix's displaced under the same hash is one of them:
// the index tells the GPU of every removal from the disk, even while the
// hash stays listed (IndexActor.dropsBelow).
func (a *DiskActor) forget(ctx actor.Context, hashes []uint64) {
	var remove []uint64
	for _, h := range hashes {
		if req, ok := a.unannounced[h]; ok {
			delete(a.unannounced, h)
			req.announce = slices.DeleteFunc(req.announce, func(x uint64) bool { return x == h })
			continue
		}
		remove = append(remove, h)
	}
	if len(remove) > 0 {
		ctx.Send(a.cfg.Index, &messages.IndexUpdate{Tier: messages.Disk, Remove: remove})
	}
}

func (a *DiskActor) flush(m *messages.Flush) {
	if a.stopped {
		m.Reply <- ErrDiskStopped
		return
	}
	f := diskFlusher{barrier: a.writeSeq, reply: m.Reply}
	if a.oldestWrite() >= f.barrier {
		f.reply <- nil
		return
	}
	a.flushers = append(a.flushers, f)
}

// oldestWrite returns the seq of the oldest pending LowerWrite, or MaxUint64.
func (a *DiskActor) oldestWrite() uint64 {
	oldest := uint64(math.MaxUint64)
	for seq := range a.writes {
		oldest = min(oldest, seq)
	}
	return oldest
}

// answerFlushers answers the flushes whose writes have all finished.
func (a *DiskActor) answerFlushers() {
	if len(a.flushers) == 0 {
		return
	}
	oldest := a.oldestWrite()
	a.flushers = slices.DeleteFunc(a.flushers, func(f diskFlusher) bool {
		if f.barrier <= oldest {
			f.reply <- nil
			return true
		}
		return false
	})
}

// query answers m on its Reply channel: at once, or for QueryDelete once
// the removals are durable.
// holds says whether the store holds hash live with digests[i] (any digest
// when the query names none).
func (a *DiskActor) holds(hash uint64, digests [][32]byte, i int) bool {
	meta, ok := a.store.Meta(hash)
	return ok && (digests == nil || (i < len(digests) && meta.Digest == digests[i]))
}

func (a *DiskActor) query(ctx actor.Context, m *messages.LowerQuery) {
	res := &messages.QueryResult{}
	if a.stopped {
		res.Err = ErrDiskStopped
		m.Reply <- res
		return
	}
	switch m.Kind {
	case messages.QueryExists:
		for i, h := range m.Hashes {
			if !a.holds(h, m.Digests, i) {
				break
			}
			res.Tokens[messages.Disk.Index()]++ // in blocks; the Manager converts
		}
	case messages.QueryDelete:
		a.remove(ctx, m)
		return
	default:
		res.Err = fmt.Errorf("kvtier: actors: disk query kind %d not supported", m.Kind)
	}
	m.Reply <- res
}

// shutdown ends the workers, completes every op, answers every pending
// request and, with closeStore, closes the store. It runs once.
func (a *DiskActor) shutdown(ctx actor.Context, closeStore bool) {
	if a.stopped {
		return
	}
	a.stopped = true
	if a.workers != nil {
		cancelled, finished := a.workers.stop()
		for _, j := range finished {
			a.finish(ctx, j)
		}
		for _, j := range cancelled {
			a.stats.cancelled++
			a.finish(ctx, j)
		}
	}
	// Every op is complete, so every request has been answered; these loops
	// only guard against a bug leaving a requester waiting for ever (a
	// panic half-way through a message, before a restart).
	for _, req := range a.reads {
		a.replyRead(ctx, req)
	}
	for _, req := range a.writes {
		a.log.Error("disk actor: write request left pending at stop", zap.Int("items", len(req.slots)))
		a.replyWrite(ctx, req)
	}
	for _, m := range []map[uint64][]*diskDeleteReq{a.doomed, a.overwritten} {
		for h, reqs := range m {
			for _, req := range reqs {
				if req.pending > 0 { // answered once, if it waits in both
					a.log.Error("disk actor: delete left waiting at stop", zap.Uint64("hash", h))
					req.pending = 0
					req.errs = append(req.errs, fmt.Errorf("kvtier: actors: disk removal of %016x: the write it waited for did not complete: %w", h, ErrDiskStopped))
					a.replyDelete(req)
				}
			}
			delete(m, h)
		}
	}
	for _, f := range a.flushers {
		f.reply <- ErrDiskStopped
	}
	a.flushers = nil
	if closeStore {
		if err := a.store.Close(); err != nil {
			a.log.Error("disk actor: closing the store", zap.Error(err))
		}
	}
}

// snapshot returns the tier's counters.
func (a *DiskActor) snapshot() messages.TierStats {
	st := a.store.Stats()
	inFlight := a.writesInFlight + len(a.readJobs) + a.copying
	queued := 0
	if a.workers != nil {
		queued = a.workers.queued()
	}
	return messages.TierStats{
		Tier:       messages.Disk,
		Blocks:     st.Slots,
		UsedBlocks: st.Live,
		BytesUsed:  int64(st.Live) * int64(a.store.PayloadBytes()), // payload, as Blocks × block bytes is the capacity; a slot adds its header
		Hits:       a.stats.hits,
		Misses:     a.stats.misses,
		Evictions:  uint64(st.Evictions),
		Offloaded:  a.stats.written,
		Onboarded:  a.stats.hits,
		Denied:     a.stats.denied,
		Timeouts:   a.stats.timeouts,
		Failed:     a.stats.failed,
		Mismatches: a.stats.mismatches,
		InFlight:   inFlight,
		Extra: map[string]float64{
			"io_direct":       b2f(st.Mode == disk.IODirect),
			"reopen_records":  float64(a.reopenRecords),
			"corrupt":         float64(st.ReadErrors.Corrupt),
			"verify_mismatch": float64(st.VerifyMismatch),
			"displaced":       float64(st.Displaced),
			"misses_observed": float64(st.MissesObserved),
			"class_hints":     float64(st.ClassHints),
			"read_errors":     float64(st.ReadErrors.Total()),
			"write_errors":    float64(st.WriteErrors.Total()),
			"write_enospc":    float64(st.WriteErrors.ENOSPC),
			"removes":         float64(st.Removes),
			"skipped":         float64(a.stats.skipped),
			"coalesced":       float64(a.stats.coalesced),
			"cancelled":       float64(a.stats.cancelled),
			"queued":          float64(queued),
			"doomed":          float64(st.Doomed),
			"bytes_written":   float64(st.BytesWritten),
			"bytes_read":      float64(st.BytesRead),
		},
	}
}

// now is the actor's clock.
func (a *DiskActor) now() time.Time {
	if a.cfg.Clock != nil {
		return a.cfg.Clock()
	}
	return time.Now()
}
