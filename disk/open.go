package disk

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/kvtier/kvtier/policy"
)

// scanWorkers bounds the concurrent header reads during Open's scan.
const scanWorkers = 8

// Open locks cfg.Dir, opens or creates the slot files and rebuilds the
// index by reading every slot's header. Records with another fingerprint,
// format or hash-scheme version or slot geometry, with a bad header
// checksum, or older duplicates of a hash are dropped, counted in the
// report and their headers zeroed. Payloads are verified on read, not
// here. The next generation is one past the largest seen. Open returns an
// error matching ErrLocked if another Store holds the directory,
// ErrInvalidConfig for a bad Config, ErrUnsafeFile for a planted link or a
// foreign file (see OSFS) and ErrInsufficientSpace where the file system
// cannot preallocate and has less free space than the slot files need. A
// failed Open removes the slot files it created (through Remover, which
// OSFS implements), e.g. after fallocate ran out of space part way; slot
// files that held data before are left with their records and their old
// length (one it grew is cut back; a smaller capacity cuts files only
// once everything else has succeeded, and so does a smaller Files remove
// the slot files past it, with their records, which the report counts as
// Dropped[DropCapacity]). The caller MUST Close the Store.
func Open(cfg Config) (*Store, OpenReport, error) {
	start := time.Now()
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, OpenReport{}, err
	}
	if err := cfg.FS.MkdirAll(cfg.Dir); err != nil {
		return nil, OpenReport{}, fmt.Errorf("kvtier: disk: create %q: %w", cfg.Dir, err)
	}
	lock, err := cfg.FS.Lock(cfg.Dir)
	if err != nil {
		return nil, OpenReport{}, err
	}
	lay := newLayout(cfg.PayloadBytes, cfg.CapacityBytes, cfg.Files)
	// The policy before the files: nothing after openSlotFiles may fail,
	// or the files it created would stay behind.
	pol, err := policy.New(cfg.Policy, lay.slots)
	if err != nil {
		_ = lock.Close()
		return nil, OpenReport{}, fmt.Errorf("kvtier: disk: %w", err)
	}
	files, mode, cut, err := openSlotFiles(cfg.FS, cfg.Dir, lay, cfg.NoDirectIO, cfg.Logger)
	if err != nil {
		_ = lock.Close()
		return nil, OpenReport{}, err
	}
	cut += removeExtra(cfg.FS, cfg.Dir, lay.files, lay.slotBytes, cfg.Logger)
	if cfg.Sync {
		syncOpened(cfg.FS, cfg.Dir, files, cfg.Logger)
	}
	s := &Store{
		splitWriteMin: defaultSplitWriteMin,
		cfg:           cfg,
		log:           cfg.Logger,
		lay:           lay,
		mode:          mode,
		files:         files,
		lock:          lock,
		slots:         make([]slot, lay.slots),
		index:         make(map[uint64]int32, lay.slots),
		reads:         make(map[uint64]*ReadOp),
		overwriting:   make(map[uint64]int),
		staleHeld:     make(map[uint64]int),
		pol:           pol,
		zero:          AlignedBuffer(BlockSize),
	}
	rep := s.rebuild()
	if cut > 0 {
		if rep.Dropped == nil {
			rep.Dropped = make(map[DropReason]int)
		}
		rep.Dropped[DropCapacity] = cut
	}
	rep.Mode = mode
	rep.Duration = time.Since(start)
	s.log.Info("kvtier: disk: opened",
		zap.String("dir", cfg.Dir), zap.Stringer("mode", mode), zap.Int("slots", lay.slots),
		zap.Int("records", rep.Records), zap.Int("dropped", rep.DroppedTotal()),
		zap.Duration("duration", rep.Duration))
	return s, rep, nil
}

// markDropped marks slot i, a dropped record whose header Open could not
// zero (or sync), stale for Close: a record the scan decoded (another
// fingerprint or geometry, an older duplicate) counts under its hash, a
// header it could not read under every hash (StaleHolds). A header that
// did not decode cannot come back as a record.
func (s *Store) markDropped(i int, sc *scanned) {
	switch {
	case sc.err != nil:
		s.markStale(int32(i))
		s.slots[i].staleUnknown = true
		s.staleUnknown++
	case sc.status == headerValid:
		s.markStale(int32(i), sc.rec.meta.Hash)
	default:
		s.markStale(int32(i))
	}
}

// scanned is what the scan found in one slot.
type scanned struct {
	status headerStatus
	rec    record
	chain  chainStatus // of a valid header
	err    error
}

// rebuild scans every header and fills the index, policy and free stack.
func (s *Store) rebuild() OpenReport {
	found := make([]scanned, s.lay.slots)
	var wg sync.WaitGroup
	workers := min(scanWorkers, s.lay.slots)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := AlignedBuffer(BlockSize)
			for i := w; i < s.lay.slots; i += workers {
				f, off := s.lay.locate(i)
				if err := readFull(s.files[f], buf, off); err != nil {
					found[i] = scanned{err: err}
					continue
				}
				sc := &found[i]
				if sc.status = decodeHeader(buf, &sc.rec); sc.status == headerValid {
					sc.rec.meta.Chain, sc.chain = decodeChain(buf, &sc.rec)
				}
			}
		}()
	}
	wg.Wait()

	rep := OpenReport{Dropped: make(map[DropReason]int)}
	drop := make([]bool, s.lay.slots)
	keep := make(map[uint64]int32)
	for i := range found {
		sc := &found[i]
		reason := DropReason(0)
		switch {
		case sc.err != nil:
			reason = DropIOError
		case sc.status == headerEmpty:
			continue
		case sc.status == headerBadMagic:
			reason = DropMagic
		case sc.status == headerBadChecksum:
			reason = DropHeaderChecksum
		case sc.status == headerBadVersion:
			reason = DropVersion
		default:
			s.gen = max(s.gen, sc.rec.generation+1)
			switch {
			case sc.rec.fingerprint != s.cfg.Fingerprint:
				reason = DropFingerprint
			case sc.rec.slotBytes != s.lay.slotBytes || sc.rec.payloadLen < 0 || sc.rec.payloadLen > s.lay.payloadCap ||
				sc.rec.payloadLen > int64(s.cfg.PayloadBytes):
				reason = DropGeometry
			}
		}
		if reason == 0 {
			j, dup := keep[sc.rec.meta.Hash]
			if !dup {
				keep[sc.rec.meta.Hash] = int32(i)
				continue
			}
			reason = DropDuplicate
			if found[j].rec.generation < sc.rec.generation {
				keep[sc.rec.meta.Hash] = int32(i)
				i = int(j)
			}
		}
		rep.Dropped[reason]++
		drop[i] = true
		s.log.Debug("kvtier: disk: dropping record", zap.Int("slot", i), zap.Stringer("reason", reason), zap.Error(sc.err))
	}

	// Zero dropped headers so later opens do not count them again — also
	// a header the scan could not read: it may hold a valid record that
	// a later Open reads, after the block was written elsewhere and removed
	// there. A slot whose zeroing fails stays stale, for a write to
	// overwrite or Close to scrub; with Config.Sync the zeroing is synced.
	zero := AlignedBuffer(BlockSize)
	zeroed := make([]bool, len(s.files))
	for i, d := range drop {
		if !d {
			continue
		}
		f, off := s.lay.locate(i)
		if err := writeFull(s.files[f], zero, off); err != nil {
			s.log.Warn("kvtier: disk: zeroing dropped header", zap.Int("slot", i), zap.Error(err))
			s.markDropped(i, &found[i])
			continue
		}
		zeroed[f] = true
	}
	for f, z := range zeroed {
		if !z || !s.cfg.Sync {
			continue
		}
		if err := s.files[f].Sync(); err != nil {
			s.log.Warn("kvtier: disk: syncing zeroed headers", zap.Int("file", f), zap.Error(err))
			for i, d := range drop {
				if fi, _ := s.lay.locate(i); d && fi == f && !s.slots[i].stale {
					s.markDropped(i, &found[i])
				}
			}
		}
	}

	live := make([]int32, 0, len(keep))
	for _, i := range keep {
		live = append(live, i)
	}
	// Oldest first, so recency-based policies see the write order.
	slices.SortFunc(live, func(a, b int32) int { return cmp.Compare(found[a].rec.generation, found[b].rec.generation) })
	for _, i := range live {
		r := &found[i].rec
		if found[i].chain == chainCorrupt {
			// The record stands (its payload is verified on read as
			// ever); only the events lose what the extension said.
			rep.BadChains++
			s.log.Warn("kvtier: disk: record's chain extension is corrupt; announced without it",
				zap.Int("slot", int(i)), zap.Uint64("hash", r.meta.Hash))
		}
		s.slots[i] = slot{state: slotLive, meta: r.meta, generation: r.generation, payloadLen: r.payloadLen}
		s.index[r.meta.Hash] = i
		s.pol.Add(r.meta.Hash)
	}
	s.free = make([]int32, 0, s.lay.slots-len(live))
	for i := s.lay.slots - 1; i >= 0; i-- {
		if s.slots[i].state == slotFree {
			s.free = append(s.free, int32(i))
		}
	}
	rep.Records = len(live)
	return rep
}
