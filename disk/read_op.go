package disk

import (
	"github.com/cespare/xxhash/v2"

	"errors"
	"fmt"
	"io"

	"go.uber.org/zap"
)

// ReadOp is one planned read of a block. PlanRead creates it and pins the
// slot; Execute does the I/O on any goroutine; CompleteRead unpins. Reads
// of one hash are coalesced: while an op is in flight, further PlanRead
// calls for its hash return the same op with first == false and bump
// Waiters, so the caller does one I/O and fans the result out. The caller
// MUST call Execute and CompleteRead once per op (from the call that got
// first == true), not once per waiter.
type ReadOp struct {
	hash        uint64
	slot        int32
	file        File
	off         int64
	meta        Meta
	generation  uint64
	payloadLen  int64
	hdr         []byte
	fingerprint uint64
	slotBytes   int64
	direct      bool

	waiters int
	removed bool // PlanRemove took the block while this op was in flight
	done    bool
}

// Removed reports whether PlanRemove removed the block while the op was in
// flight; its scrub may then make Execute fail, which CompleteRead does
// not count as a read error. Read it on the owner goroutine.
func (op *ReadOp) Removed() bool { return op.removed }

// Hash returns the block hash being read.
func (op *ReadOp) Hash() uint64 { return op.hash }

// Meta returns the block's metadata as indexed.
func (op *ReadOp) Meta() Meta { return op.meta }

// Len returns the payload length; Execute needs a dst at least this long.
func (op *ReadOp) Len() int { return int(op.payloadLen) }

// Waiters returns how many PlanRead calls share this op (1 if none was
// coalesced). Read it on the owner goroutine.
func (op *ReadOp) Waiters() int { return op.waiters }

// PlanRead pins the slot holding hash and returns the read to perform.
// digest is the prefix digest the caller expects (Meta.Digest; zero for a
// caller that stores none): a block stored with another digest is never
// read. PlanRead returns ErrNotFound on a miss, ErrDigestMismatch when the
// indexed digest differs (a miss too, counted in Stats.VerifyMismatch; the
// block stays for readers that expect its digest) and ErrClosed after
// Close; the errors are the bare sentinels, so a miss does not allocate.
// If a read of hash is already in flight it returns that op with
// first == false; only the caller that got first == true executes and
// completes it. No I/O happens here; a hit counts as an access for the
// eviction policy.
func (s *Store) PlanRead(hash uint64, digest [32]byte) (op *ReadOp, first bool, err error) {
	if s.closed {
		return nil, false, ErrClosed
	}
	if op, ok := s.reads[hash]; ok {
		if op.meta.Digest != digest {
			s.stats.VerifyMismatch++
			return nil, false, ErrDigestMismatch
		}
		op.waiters++
		s.stats.ReadWaiters++
		s.pol.Access(hash)
		return op, false, nil
	}
	i, ok := s.index[hash]
	if !ok || s.slots[i].state != slotLive {
		return nil, false, ErrNotFound
	}
	if s.slots[i].meta.Digest != digest {
		s.stats.VerifyMismatch++
		return nil, false, ErrDigestMismatch
	}
	sl := &s.slots[i]
	if sl.pins == 0 {
		s.pinned++
	}
	sl.pins++
	s.pol.Access(hash)
	f, off := s.lay.locate(int(i))
	op = &ReadOp{
		hash:        hash,
		slot:        i,
		file:        s.files[f],
		off:         off,
		meta:        sl.meta,
		generation:  sl.generation,
		payloadLen:  sl.payloadLen,
		hdr:         s.getHeader(),
		fingerprint: s.cfg.Fingerprint,
		slotBytes:   s.lay.slotBytes,
		direct:      s.mode == IODirect,
		waiters:     1,
	}
	s.reads[hash] = op
	return op, true, nil
}

// Execute reads the header and payload into dst[:op.Len()] and verifies
// the header checksum, every header field against the index (hash, parent,
// namespace, tokens and digest, which PlanRead matched with the reader's)
// and the payload checksum. A mismatch returns a *CorruptError (errors.Is ErrCorrupt) and
// clears dst[:op.Len()], so bad bytes are never handed out as data. It
// touches no Store state and may run on any goroutine. Under O_DIRECT an
// aligned dst at least as long as the rounded-up length is read in place
// (its bytes past op.Len() up to that length are overwritten); any other
// goes through a bounce buffer. Nothing past len(dst) is written, whatever
// its capacity. dst shorter than op.Len() panics.
func (op *ReadOp) Execute(dst []byte) error {
	if op.done {
		panic("kvtier: disk: ReadOp.Execute after CompleteRead")
	}
	if len(dst) < int(op.payloadLen) {
		panic(fmt.Sprintf("kvtier: disk: ReadOp.Execute: dst of %d bytes for a %d-byte payload", len(dst), op.payloadLen))
	}
	out := dst[:op.payloadLen]
	buf := out
	if op.direct {
		padded := int(roundUp(op.payloadLen))
		if isAligned(dst) && len(dst) >= padded {
			buf = dst[:padded]
		} else {
			buf = AlignedBuffer(padded)
		}
	}
	sum, err := readRecordSum(op.file, op.hdr, buf, op.off, len(out))
	if err != nil {
		clear(out)
		return fmt.Errorf("kvtier: disk: read %016x at %d: %w", op.hash, op.off, err)
	}
	var r record
	if st := decodeHeader(op.hdr, &r); st != headerValid {
		return op.corrupt(dst, fmt.Sprintf("header status %d", st))
	}
	switch {
	case r.meta.Digest != op.meta.Digest:
		return op.corruptErr(dst, "digest differs from the index", ErrDigestMismatch)
	case r.meta != op.meta.recorded():
		return op.corrupt(dst, "header metadata differs from the index")
	case r.fingerprint != op.fingerprint:
		return op.corrupt(dst, "fingerprint")
	case r.generation != op.generation:
		return op.corrupt(dst, "generation")
	case r.slotBytes != op.slotBytes || r.payloadLen != op.payloadLen:
		return op.corrupt(dst, "geometry")
	}
	if len(out) > 0 && &buf[0] != &out[0] {
		copy(out, buf)
	}
	if sum != r.payloadSum {
		return op.corrupt(dst, "payload checksum")
	}
	return nil
}

func (op *ReadOp) corrupt(dst []byte, reason string) error { return op.corruptErr(dst, reason, nil) }

func (op *ReadOp) corruptErr(dst []byte, reason string, sentinel error) error {
	clear(dst[:op.payloadLen])
	return &CorruptError{Hash: op.hash, Slot: int(op.slot), Reason: reason, Err: sentinel}
}

// readChunk is the size of the reads a payload of more than two chunks is
// read in, so that its checksum is computed chunk by chunk as the chunks
// arrive. A payload of up to two chunks is read in one preadv and summed
// after: on this project's VMs, side by side in kvbench's copy suite, one
// read of a 2 MiB payload plus its xxh64 ran at 76-93% of a plain pread
// (median 89% over 14 runs), and eight 256 KiB reads at once at 67-93%
// (median 80%), never past about 1.7 GB/s, as each concurrent read costs
// the virtual disk more than the sum saves; two 1 MiB reads at once measured
// 80-85%.
const readChunk = 1 << 20

// readRecordSum reads a slot's header block and payload as readRecord does
// and returns the checksum of the payload's first n bytes. A payload of more
// than two chunks is read in chunks, all at once (the first with the header,
// in one preadv), so the device sees them together as it would one big read;
// each chunk is summed, in order, as soon as it and those before it have
// arrived. It returns only once every read has ended: the caller owns
// payload again.
func readRecordSum(f File, hdr, payload []byte, off int64, n int) (uint64, error) {
	if len(payload) <= 2*readChunk {
		if err := readRecord(f, hdr, payload, off); err != nil {
			return 0, err
		}
		return Checksum(payload[:n]), nil
	}
	nc := (len(payload) + readChunk - 1) / readChunk
	errs := make([]error, nc)
	done := make([]chan struct{}, nc)
	for i := range nc {
		done[i] = make(chan struct{})
		go func() {
			defer close(done[i])
			at, end := i*readChunk, min((i+1)*readChunk, len(payload))
			if i == 0 {
				errs[i] = readRecord(f, hdr, payload[:end], off)
			} else {
				errs[i] = readFull(f, payload[at:end], off+int64(len(hdr)+at))
			}
		}()
	}
	d := xxhash.New()
	var err error
	for i := range nc {
		<-done[i]
		if err == nil {
			err = errs[i]
		}
		if at := i * readChunk; err == nil && at < n {
			_, _ = d.Write(payload[at:min((i+1)*readChunk, n)])
		}
	}
	return d.Sum64(), err
}

// readRecord reads a slot's header block and payload, with one preadv
// where the File supports it and two reads otherwise.
func readRecord(f File, hdr, payload []byte, off int64) error {
	if v, ok := f.(VectoredReader); ok {
		want := len(hdr) + len(payload)
		n, err := v.ReadvAt([][]byte{hdr, payload}, off)
		if n == want {
			return nil
		}
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if err := readFull(f, hdr, off); err != nil {
		return err
	}
	return readFull(f, payload, off+int64(len(hdr)))
}

func readFull(f File, p []byte, off int64) error {
	n, err := f.ReadAt(p, off)
	if n == len(p) {
		return nil // io.ReaderAt may return io.EOF with a full read at the end
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// CompleteRead consumes op and unpins its slot. With err != nil (corrupt
// record or I/O error) the block is removed: unpublished at once and its
// slot freed, and err is counted in Stats.ReadErrors; with an err matching
// ErrReadCanceled (Execute never ran) the block stays and nothing is
// counted. Every waiter of a coalesced op shares err. Completing an op
// twice panics.
func (s *Store) CompleteRead(op *ReadOp, err error) {
	if op.done {
		panic("kvtier: disk: CompleteRead called twice")
	}
	op.done = true
	if s.reads[op.hash] == op {
		delete(s.reads, op.hash)
	}
	s.putHeader(op.hdr)
	op.hdr = nil
	sl := &s.slots[op.slot]
	if sl.pins <= 0 {
		panic("kvtier: disk: CompleteRead on an unpinned slot")
	}
	switch {
	case errors.Is(err, ErrReadCanceled):
	case err != nil && op.removed:
		// The removal's scrub raced this read: a miss, not a fault.
		s.log.Debug("kvtier: disk: read of a removed block failed", zap.Uint64("hash", op.hash), zap.Error(err))
	case err != nil:
		s.stats.ReadErrors.count(err)
		if errors.Is(err, ErrDigestMismatch) {
			s.stats.VerifyMismatch++
		}
		s.log.Warn("kvtier: disk: read failed, dropping block", zap.Uint64("hash", op.hash), zap.Error(err))
		if sl.state == slotLive {
			s.unpublish(op.slot, false /* scrub */) // doomed: we still hold the pin
		}
	default:
		s.stats.Reads++
		s.stats.BytesRead += op.payloadLen
	}
	sl.pins--
	if sl.pins == 0 {
		s.pinned--
		if sl.state == slotDoomed && !sl.scrubbing {
			s.doomed--
			s.release(op.slot, sl.stale)
		}
	}
	if invariants {
		s.mustCheck()
	}
}

// ReadSync plans, executes and completes one read of a block stored with
// the zero digest on the calling goroutine, filling dst[:n]; see
// ReadSyncDigest.
func (s *Store) ReadSync(hash uint64, dst []byte) (m Meta, n int, err error) {
	return s.ReadSyncDigest(hash, [32]byte{}, dst)
}

// ReadSyncDigest plans, executes and completes one read on the calling
// goroutine, filling dst[:n]. A miss returns ErrNotFound, a block stored
// with another digest ErrDigestMismatch (both wrapped); a corrupt record
// returns an error matching ErrCorrupt and is removed.
func (s *Store) ReadSyncDigest(hash uint64, digest [32]byte, dst []byte) (m Meta, n int, err error) {
	op, first, err := s.PlanRead(hash, digest)
	if err != nil {
		return Meta{}, 0, fmt.Errorf("kvtier: disk: read %016x: %w", hash, err)
	}
	if !first {
		panic("kvtier: disk: ReadSync while an asynchronous read of the same hash is in flight")
	}
	err = op.Execute(dst)
	s.CompleteRead(op, err)
	if err != nil {
		return Meta{}, 0, err
	}
	return op.meta, op.Len(), nil
}
