package disk

import (
	"fmt"
	"io"

	"github.com/kvtier/kvtier/policy"

	"go.uber.org/zap"
)

// WriteOp is one planned write. PlanWrite creates it on the owner
// goroutine; Execute does the I/O on any goroutine; CompleteWrite, back on
// the owner, consumes it. The caller MUST pass every WriteOp to
// CompleteWrite exactly once, whether or not Execute ran or failed, or the
// slot stays reserved for ever. Fields are read-only outside Execute.
type WriteOp struct {
	slot   int32
	file   File
	off    int64 // header block offset; the payload follows
	hdr    []byte
	rec    record
	sync   bool
	direct bool
	// splitMin is the smallest payload written apart from its header (see
	// Execute); smaller ones go in one pwritev where the file has it.
	splitMin int
	maxLen   int    // Config.PayloadBytes
	zero     []byte // one zero header block, shared read-only

	victim  Meta
	evicted bool

	n        int64 // payload bytes written, set by Execute
	executed bool  // Execute succeeded
	scrubbed bool  // Execute failed and zeroed the slot's header after
	done     bool
}

// Meta returns the metadata of the block being written.
func (op *WriteOp) Meta() Meta { return op.rec.meta }

// Victim returns the block PlanWrite evicted to make room, if any. The
// victim is already unpublished; the caller updates its own index. Its
// header stays in the slot until the write lands (Store.Overwriting).
func (op *WriteOp) Victim() (Meta, bool) { return op.victim, op.evicted }

// Scrubbed reports, once CompleteWrite consumed op, whether its slot's
// header no longer holds an earlier record: the write landed, or it failed
// and zeroed the header. Otherwise (a write that never ran, or whose
// zeroing failed) the slot is stale until Close, and an evicted victim's
// record would come back after a crash.
func (op *WriteOp) Scrubbed() bool { return op.executed || op.scrubbed }

// PlanWrite reserves a slot for m. It takes a free slot, or else asks the
// policy for an unpinned victim, which is unpublished at once and reported
// by WriteOp.Victim. A live record of m.Hash with another digest (another
// prefix under the 64-bit hash: a forged collision) that no read pins is
// displaced the same way, its own slot rewritten: were the first record
// kept, a tenant that forged a victim's chain and wrote it first would
// keep the victim's blocks off the disk. It returns ErrExists if m.Hash is
// stored with m.Digest, is being written, or is held by a pinned record of
// another digest; ErrNoSpace if every slot is pinned or being written; and
// ErrClosed after Close. No I/O happens here.
func (s *Store) PlanWrite(m Meta) (*WriteOp, error) {
	if s.closed {
		return nil, ErrClosed
	}
	if m.Tokens < 0 {
		panic("kvtier: disk: PlanWrite with negative Tokens")
	}
	op := &WriteOp{sync: s.cfg.Sync, direct: s.mode == IODirect, splitMin: s.splitWriteMin,
		maxLen: s.cfg.PayloadBytes, zero: s.zero}
	if i, ok := s.index[m.Hash]; ok {
		if sl := &s.slots[i]; sl.state != slotLive || sl.meta.Digest == m.Digest || sl.pins > 0 {
			return nil, fmt.Errorf("kvtier: disk: plan write %016x: %w", m.Hash, ErrExists)
		}
		s.pol.Remove(m.Hash)
		s.evictInto(op, i)
		s.stats.Displaced++
	} else if n := len(s.free); n > 0 {
		op.slot = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		k, ok := s.pol.Evict(func(k uint64) bool { return s.slots[s.index[k]].pins == 0 })
		if !ok {
			return nil, fmt.Errorf("kvtier: disk: plan write %016x: %w", m.Hash, ErrNoSpace)
		}
		s.evictInto(op, s.index[k])
	}
	s.slots[op.slot] = slot{state: slotWriting, meta: m, generation: s.gen, overwrites: op.victim.Hash, overwriting: op.evicted,
		staleHashes: s.slots[op.slot].staleHashes, staleUnknown: s.slots[op.slot].staleUnknown} // a free slot's stale records stay until the write lands
	if op.evicted {
		s.overwriting[op.victim.Hash]++
	}
	s.index[m.Hash] = op.slot
	s.writing++
	f, off := s.lay.locate(int(op.slot))
	op.file, op.off = s.files[f], off
	op.hdr = s.getHeader()
	op.rec = record{
		fingerprint: s.cfg.Fingerprint,
		meta:        m,
		slotBytes:   s.lay.slotBytes,
		generation:  s.gen,
	}
	s.gen++
	return op, nil
}

// evictInto makes live slot i op's slot, its record op's victim: the
// record leaves the index now (the caller has taken it from the policy);
// its header stays until op's lands (Store.Overwriting).
func (s *Store) evictInto(op *WriteOp, i int32) {
	op.victim, op.evicted = s.slots[i].meta, true
	delete(s.index, op.victim.Hash)
	op.slot = i
	s.stats.Evictions++
}

// Execute writes payload and header: in one pwritev for a payload under
// defaultSplitWriteMin without Config.Sync, else the payload and then the
// header (with fdatasync after each when Config.Sync). It touches no Store
// state and may run on any goroutine. Under O_DIRECT a BlockSize-aligned
// payload whose length is a multiple of BlockSize is written in place; any
// other is copied into a bounce buffer first. Nothing past len(payload) is
// read, and payload is not retained: it is the caller's again when Execute
// returns.
//
// A write that fails zeroes the slot's header block before it returns: the
// slot may hold a whole header of this block (the bytes landed, the error
// came after) or of the block evicted to make room, and either would be
// indexed again at the next Open, where a later removal of that block from
// another slot would not reach it. If zeroing fails too, the slot stays
// marked stale and Close retries.
func (op *WriteOp) Execute(payload []byte) error {
	if op.done {
		panic("kvtier: disk: WriteOp.Execute after CompleteWrite")
	}
	err := op.execute(payload)
	if err != nil {
		op.scrubbed = op.scrub() == nil
	}
	return err
}

// scrub zeroes the slot's header block, synced when Config.Sync.
func (op *WriteOp) scrub() error { return zeroHeader(op.file, op.zero, op.off, op.sync) }

// sumPayload is Checksum; a test wraps it to see when the sum that
// execute runs beside the payload write has finished.
var sumPayload = Checksum

// zeroHeader writes the zero header block zero at off, then fdatasync when
// sync: what a removal and a failed write leave in a slot.
func zeroHeader(f File, zero []byte, off int64, sync bool) error {
	if err := writeFull(f, zero, off); err != nil {
		return err
	}
	if sync {
		return f.Sync()
	}
	return nil
}

func (op *WriteOp) execute(payload []byte) error {
	if len(payload) > op.maxLen {
		return fmt.Errorf("kvtier: disk: write %016x: %d bytes > %d: %w",
			op.rec.meta.Hash, len(payload), op.maxLen, ErrTooLarge)
	}
	buf := payload
	if op.direct {
		padded := int(roundUp(int64(len(payload))))
		if isAligned(payload) && len(payload) == padded {
			buf = payload // nothing past len(payload) is read, whatever its capacity
		} else {
			buf = AlignedBuffer(padded)
			copy(buf, payload)
		}
	}
	if v, ok := op.file.(VectoredWriter); ok && !op.sync && len(payload) < op.splitMin {
		return op.executeVectored(v, payload, buf)
	}
	// The checksum goes into the header, written after the payload: compute
	// it while the payload write is in flight. In series, as one pwritev of
	// header and payload needs it, xxh64 cost 10-20% of a 2 MiB write here
	// (kvbench -suite copy: 78-92% of pwrite that way, 85-105% this way).
	sum := make(chan uint64, 1)
	go func() { sum <- sumPayload(payload) }()
	if err := writeFull(op.file, buf, op.off+BlockSize); err != nil {
		<-sum
		return fmt.Errorf("kvtier: disk: write payload %016x at %d: %w", op.rec.meta.Hash, op.off+BlockSize, err)
	}
	if op.sync {
		if err := op.file.Sync(); err != nil {
			<-sum // the payload is the caller's again once Execute returns
			return fmt.Errorf("kvtier: disk: sync payload %016x: %w", op.rec.meta.Hash, err)
		}
	}
	op.rec.payloadLen = int64(len(payload))
	op.rec.payloadSum = <-sum
	encodeHeader(op.hdr, &op.rec)
	if err := writeFull(op.file, op.hdr, op.off); err != nil {
		return fmt.Errorf("kvtier: disk: write header %016x at %d: %w", op.rec.meta.Hash, op.off, err)
	}
	if op.sync {
		if err := op.file.Sync(); err != nil {
			return fmt.Errorf("kvtier: disk: sync header %016x: %w", op.rec.meta.Hash, err)
		}
	}
	op.n = int64(len(payload))
	op.executed = true
	return nil
}

// defaultSplitWriteMin is the smallest payload Execute writes apart from its
// header, with its checksum summed meanwhile; a smaller one goes with its
// header in one pwritev, summed first. Written both ways alternately on one
// store (go test -run x -bench DiskWriteWays -benchtime 400x -count 3
// ./disk, O_DIRECT on this VM's ext4, 2026-11-25), one pwritev took 0.48-0.50
// of the split write's time at 32 KiB, 0.71-0.76 at 256 KiB, 0.88-0.90 at
// 1 MiB, 1.02 at 2 MiB and 1.10 at 8 MiB: two I/Os cost more than summing
// a small payload in series.
const defaultSplitWriteMin = 2 << 20

// executeVectored writes header and payload in one pwritev, the checksum
// computed first: for a small payload one I/O costs less than two, and
// summing it is short beside either (see defaultSplitWriteMin). One call
// does not order the sectors it lands, so a crash may tear it anywhere: a
// torn header fails its own checksum at Open, and a whole header over a
// torn payload, or the slot's old header over part of the new payload,
// fails the payload checksum every read verifies (a miss, never data).
func (op *WriteOp) executeVectored(v VectoredWriter, payload, buf []byte) error {
	op.rec.payloadLen = int64(len(payload))
	op.rec.payloadSum = Checksum(payload)
	encodeHeader(op.hdr, &op.rec)
	n, err := v.WritevAt([][]byte{op.hdr, buf}, op.off)
	if err == nil && n < len(op.hdr)+len(buf) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return fmt.Errorf("kvtier: disk: write %016x at %d: %w", op.rec.meta.Hash, op.off, err)
	}
	op.n = int64(len(payload))
	op.executed = true
	return nil
}

func writeFull(f File, p []byte, off int64) error {
	n, err := f.WriteAt(p, off)
	if err != nil {
		return err
	}
	if n < len(p) {
		return io.ErrShortWrite
	}
	return nil
}

// CompleteWrite consumes op. With err == nil the block is published: it is
// indexed, handed to the policy and readable. Otherwise the slot is freed,
// the block stays unpublished and err is counted in Stats.WriteErrors.
// Completing an op twice panics.
func (s *Store) CompleteWrite(op *WriteOp, err error) {
	if op.done {
		panic("kvtier: disk: CompleteWrite called twice")
	}
	op.done = true
	s.putHeader(op.hdr)
	op.hdr = nil
	sl := &s.slots[op.slot]
	if sl.state != slotWriting || sl.meta.Hash != op.rec.meta.Hash {
		panic("kvtier: disk: CompleteWrite for a slot that is not being written by this op")
	}
	s.writing--
	if sl.overwriting {
		if s.overwriting[sl.overwrites]--; s.overwriting[sl.overwrites] == 0 {
			delete(s.overwriting, sl.overwrites)
		}
		sl.overwriting = false
	}
	if err == nil && !op.executed {
		err = fmt.Errorf("kvtier: disk: complete write %016x: Execute did not run: %w", op.rec.meta.Hash, io.ErrShortWrite)
	}
	if err != nil {
		delete(s.index, sl.meta.Hash)
		// Unless Execute zeroed it, a whole header (this block's or the
		// evicted one's) may survive in the slot: Close zeroes it then.
		if !op.scrubbed {
			s.markStale(op.slot, op.rec.meta.Hash)
			if op.evicted {
				s.markStale(op.slot, op.victim.Hash)
			}
		}
		s.release(op.slot, !op.scrubbed)
		s.stats.WriteErrors.count(err)
		s.log.Warn("kvtier: disk: write failed", zap.Uint64("hash", op.rec.meta.Hash), zap.Error(err))
		return
	}
	s.clearStale(op.slot) // the new header is over whatever was there
	// The Chain is on disk now, for the next Open; the caller's is let go
	// (its token ids may share an array with other blocks', see Meta.Chain).
	sl.meta.Chain = nil
	sl.state = slotLive
	sl.payloadLen = op.n
	if policy.AddClass(s.pol, sl.meta.Hash, sl.meta.Class) {
		s.stats.ClassHints++
	}
	s.stats.Writes++
	s.stats.BytesWritten += op.n
	if invariants {
		s.mustCheck()
	}
}

// WriteSync plans, executes and completes one write on the calling
// goroutine. It returns the evicted victim, if any.
func (s *Store) WriteSync(m Meta, payload []byte) (victim Meta, evicted bool, err error) {
	if len(payload) > s.cfg.PayloadBytes { // before PlanWrite evicts anything
		return Meta{}, false, fmt.Errorf("kvtier: disk: write %016x: %d bytes > %d: %w",
			m.Hash, len(payload), s.cfg.PayloadBytes, ErrTooLarge)
	}
	op, err := s.PlanWrite(m)
	if err != nil {
		return Meta{}, false, err
	}
	err = op.Execute(payload)
	s.CompleteWrite(op, err)
	victim, evicted = op.Victim()
	return victim, evicted, err
}
