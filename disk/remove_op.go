package disk

import (
	"errors"
	"fmt"

	"go.uber.org/zap"
)

// RemoveOp is one planned removal: the block is already unpublished and
// its slot is held until the record's header block has been zeroed on
// disk, so a crash after CompleteRemove never brings the block back.
// PlanRemove creates it on the owner goroutine; Execute zeroes the header
// on any goroutine; CompleteRemove, back on the owner, consumes it. The
// caller MUST pass every RemoveOp to CompleteRemove exactly once, whether
// or not Execute ran or failed, or the slot stays held for ever.
type RemoveOp struct {
	slot int32
	meta Meta
	file File
	off  int64
	zero []byte // shared, read-only
	sync bool

	executed bool
	done     bool
}

// Meta returns the metadata of the block being removed.
func (op *RemoveOp) Meta() Meta { return op.meta }

// PlanRemove unpublishes hash at once (Contains, PlanRead and Range no
// longer see it) and returns the op that makes the removal durable. The
// slot is not reused until CompleteRemove and until the reads already in
// flight on it complete; those reads may still succeed (they began before
// the removal) or fail. It returns ErrNotFound if hash is not live and
// ErrClosed after Close. No I/O happens here.
func (s *Store) PlanRemove(hash uint64) (*RemoveOp, error) {
	if s.closed {
		return nil, ErrClosed
	}
	i, ok := s.index[hash]
	if !ok || s.slots[i].state != slotLive {
		return nil, fmt.Errorf("kvtier: disk: remove %016x: %w", hash, ErrNotFound)
	}
	sl := &s.slots[i]
	op := &RemoveOp{slot: i, meta: sl.meta, zero: s.zero, sync: s.cfg.Sync}
	f, off := s.lay.locate(int(i))
	op.file, op.off = s.files[f], off
	s.unpublish(i, true /* scrub */)
	s.stats.Removes++
	return op, nil
}

// Execute zeroes the record's header block, followed by fdatasync when
// Config.Sync. It touches no Store state and may run on any goroutine.
func (op *RemoveOp) Execute() error {
	if op.done {
		panic("kvtier: disk: RemoveOp.Execute after CompleteRemove")
	}
	if err := zeroHeader(op.file, op.zero, op.off, op.sync); err != nil {
		return fmt.Errorf("kvtier: disk: scrub header %016x at %d: %w", op.meta.Hash, op.off, err)
	}
	op.executed = true
	return nil
}

// CompleteRemove consumes op. The block stays removed either way; with err
// != nil (or if Execute did not run) the header may survive a crash, err is
// counted in Stats.RemoveErrors and Close tries the scrub again. The slot
// becomes free once no read holds it. Completing an op twice panics.
func (s *Store) CompleteRemove(op *RemoveOp, err error) {
	if op.done {
		panic("kvtier: disk: CompleteRemove called twice")
	}
	op.done = true
	sl := &s.slots[op.slot]
	if sl.state != slotDoomed || !sl.scrubbing {
		panic("kvtier: disk: CompleteRemove for a slot that is not being scrubbed")
	}
	sl.scrubbing = false
	s.removing--
	if err == nil && !op.executed {
		err = fmt.Errorf("kvtier: disk: complete remove %016x: Execute did not run: %w", op.meta.Hash, ErrNotDurable)
	}
	if err != nil {
		s.stats.RemoveErrors.count(err)
		s.log.Warn("kvtier: disk: scrubbing a removed header failed", zap.Uint64("hash", op.meta.Hash), zap.Error(err))
		s.markStale(op.slot, op.meta.Hash)
	} else {
		s.clearStale(op.slot)
	}
	if sl.pins == 0 {
		s.doomed--
		s.release(op.slot, sl.stale)
	}
	if invariants {
		s.mustCheck()
	}
}

// RemoveSync plans, executes and completes one removal on the calling
// goroutine. It returns an error matching ErrNotFound if hash is not live
// and no write in flight overwrites a record of it; any other error means
// the block is gone from the store but a header of it may come back after
// a crash: ErrNotDurable while a write overwrites one (Overwriting; a
// RemoveSync after that write completed makes the removal durable) or a
// stale slot may hold one (StaleHolds).
func (s *Store) RemoveSync(hash uint64) error {
	op, err := s.PlanRemove(hash)
	if err != nil && !(errors.Is(err, ErrNotFound) && (s.Overwriting(hash) || s.StaleHolds(hash))) {
		return err
	}
	if op != nil {
		err = op.Execute()
		s.CompleteRemove(op, err)
		if err != nil {
			return err
		}
	}
	if s.Overwriting(hash) {
		return fmt.Errorf("kvtier: disk: remove %016x: a write in flight still overwrites a record of it: %w", hash, ErrNotDurable)
	}
	if s.StaleHolds(hash) {
		return fmt.Errorf("kvtier: disk: remove %016x: a slot whose header could not be zeroed may still hold a record of it (until Close): %w", hash, ErrNotDurable)
	}
	return nil
}
