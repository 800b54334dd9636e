package disk

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// layout maps slot numbers to (file, offset). Slots are spread round-robin
// over the files so consecutive slots land in different files.
type layout struct {
	slotBytes  int64 // header block + payload capacity
	payloadCap int64 // PayloadBytes rounded up to BlockSize
	slots      int
	files      int
}

func newLayout(payloadBytes int, capacityBytes int64, files int) layout {
	sb := SlotBytes(payloadBytes)
	return layout{
		slotBytes:  sb,
		payloadCap: sb - BlockSize,
		slots:      int(capacityBytes / sb),
		files:      files,
	}
}

// locate returns the file index and byte offset of slot s's header block;
// its payload follows at offset + BlockSize.
func (l layout) locate(s int) (file int, off int64) {
	return s % l.files, int64(s/l.files) * l.slotBytes
}

// fileSlots returns how many slots file i holds.
func (l layout) fileSlots(i int) int { return (l.slots - i + l.files - 1) / l.files }

// slotFileName returns the name of the i-th slot file in dir.
func slotFileName(dir string, i int) string {
	return filepath.Join(dir, fmt.Sprintf("slots-%03d.kv", i))
}

// openSlotFiles opens (creating as needed) and sizes the slot files. It
// tries O_DIRECT unless noDirect, probing with an aligned read and
// write-back of file 0's first block, and falls back to buffered I/O where
// the file system refuses it. If it fails, it removes (where fsys is a
// Remover) the slot files this call created, so a failed Open leaves no
// preallocated files; files that existed with data are left as they are.
// cut is how many records the files held past a smaller capacity, cut away
// with them.
func openSlotFiles(fsys FS, dir string, l layout, noDirect bool, log *zap.Logger) (files []File, mode IOMode, cut int, err error) {
	o := &opening{created: make(map[string]bool), sizes: make(map[string]int64)}
	files, mode, err = openSlotFilesOnce(fsys, dir, l, noDirect, log, o)
	if err != nil {
		restoreSizes(fsys, o, log)
		removeCreated(fsys, o.created, log)
		return nil, 0, 0, err
	}
	return files, mode, o.cut, nil
}

// opening is what a failed Open needs to undo: the slot files it found
// empty (created), and the size each slot file had when Open first saw it.
type opening struct {
	created map[string]bool
	sizes   map[string]int64
	// cut counts the records in the parts of slot files a smaller capacity
	// cut away (OpenReport.Dropped[DropCapacity]).
	cut int
}

// restoreSizes gives the slot files that held data and that a failed Open
// grew their old length back, so that a store reopened with a capacity the
// disk cannot hold is left as it was. (Open shrinks files last, once
// everything else has succeeded, so a failed Open has shrunk none.)
func restoreSizes(fsys FS, o *opening, log *zap.Logger) {
	for name, size := range o.sizes {
		if size == 0 || o.created[name] {
			continue
		}
		f, err := fsys.OpenFile(name, false)
		if err != nil {
			log.Warn("kvtier: disk: reopening a slot file a failed open grew", zap.String("file", name), zap.Error(err))
			continue
		}
		if cur, err := f.Size(); err == nil && cur > size {
			var sparse *SparseError
			if err := f.Allocate(size); err != nil && !errors.As(err, &sparse) {
				log.Warn("kvtier: disk: shrinking a slot file a failed open grew back to its size",
					zap.String("file", name), zap.Int64("size", size), zap.Int64("grown", cur), zap.Error(err))
			}
		}
		_ = f.Close()
	}
}

func openSlotFilesOnce(fsys FS, dir string, l layout, noDirect bool, log *zap.Logger, o *opening) ([]File, IOMode, error) {
	if !noDirect {
		files, err := openAll(fsys, dir, l, true /* direct */, log, o)
		if err == nil {
			if err = probeDirect(files[0]); err == nil {
				return files, IODirect, nil
			}
			closeAll(files)
		}
		if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EOPNOTSUPP) {
			return nil, 0, err
		}
	}
	files, err := openAll(fsys, dir, l, false /* direct */, log, o)
	if err != nil {
		return nil, 0, err
	}
	return files, IOBuffered, nil
}

// removeCreated removes the slot files named in created. A file Open
// found empty counts as created: it held no records.
func removeCreated(fsys FS, created map[string]bool, log *zap.Logger) {
	r, ok := fsys.(Remover)
	if !ok {
		if len(created) > 0 {
			log.Warn("kvtier: disk: cannot remove the slot files a failed open created: the file system has no Remove",
				zap.Int("files", len(created)))
		}
		return
	}
	for name := range created {
		if err := r.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			log.Warn("kvtier: disk: removing a slot file a failed open created", zap.String("file", name), zap.Error(err))
		}
	}
}

// removeExtra removes the slot files numbered from files up, left by a
// store opened before with more Files: their records cannot be reached
// now, and a later Open with more Files again would index them, bringing
// back blocks removed meanwhile from the files still in use. It stops at
// the first number with no file (a store with fewer files removed those
// past them). It runs once everything else in Open has succeeded; a file it
// cannot remove is logged, and its records may come back that way, as
// they may on a file system with no Remove (OSFS has one). It returns how
// many records the files it removed held (slots of slotBytes).
func removeExtra(fsys FS, dir string, files int, slotBytes int64, log *zap.Logger) (removed int) {
	r, ok := fsys.(Remover)
	if !ok {
		return 0
	}
	for i := files; ; i++ {
		name := slotFileName(dir, i)
		n := 0
		if o, ok := fsys.(ExistingOpener); ok {
			if f, err := o.OpenExisting(name); err == nil {
				if size, err := f.Size(); err == nil {
					n = countRecords(f, 0, size, slotBytes)
				}
				_ = f.Close()
			}
		}
		err := r.Remove(name)
		if errors.Is(err, fs.ErrNotExist) {
			return
		}
		if err != nil {
			log.Error("kvtier: disk: removing a slot file past Config.Files", zap.String("file", name), zap.Error(err))
			return
		}
		log.Info("kvtier: disk: removed a slot file past Config.Files, with its records", zap.String("file", name), zap.Int("records", n))
		removed += n
	}
}

// syncOpened makes what Open changed durable under Config.Sync: each slot
// file's length (one cut to a smaller capacity keeps, after a machine
// crash, no records past the cut that a later Open with more capacity
// would index again), the slot files' names in dir (those Open created,
// and the removal of those removeExtra removed) and dir's name in its
// parent (MkdirAll may have created it), the last two where fsys is a
// DirSyncer. A failure is logged: the store works as opened, but after a
// machine crash a created file may be gone (its records lost), or a
// removed or cut one back (its records reach a later Open again).
func syncOpened(fsys FS, dir string, files []File, log *zap.Logger) {
	for i, f := range files {
		if err := f.Sync(); err != nil {
			log.Error("kvtier: disk: syncing a slot file at open", zap.Int("file", i), zap.Error(err))
		}
	}
	d, ok := fsys.(DirSyncer)
	if !ok {
		return
	}
	for _, name := range []string{dir, filepath.Dir(dir)} {
		if err := d.SyncDir(name); err != nil {
			log.Error("kvtier: disk: syncing a directory at open", zap.String("dir", name), zap.Error(err))
		}
	}
}

// openAll opens and sizes every slot file. Where the file system cannot
// reserve blocks it checks that the free space covers the holes left, and
// refuses (ErrInsufficientSpace) otherwise: a sparse file larger than the
// free space would fail writes with ENOSPC later. It records in o the name
// of every file it found empty (it created it, or it held nothing) and
// each file's size when first seen. Files that must shrink (a smaller
// capacity) are cut last, once every other step has succeeded: a failed
// Open must not have destroyed records.
func openAll(fsys FS, dir string, l layout, direct bool, log *zap.Logger, o *opening) ([]File, error) {
	files := make([]File, 0, l.files)
	cur := make([]int64, 0, l.files)
	for i := range l.files {
		name := slotFileName(dir, i)
		f, err := fsys.OpenFile(name, direct)
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("kvtier: disk: open %q (direct=%t): %w", name, direct, err)
		}
		files = append(files, f)
		size, err := f.Size()
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("kvtier: disk: size of %q: %w", name, err)
		}
		if _, seen := o.sizes[name]; !seen {
			o.sizes[name] = size
		}
		if size == 0 {
			o.created[name] = true
		}
		cur = append(cur, size)
	}
	var holes int64
	allocate := func(i int) error {
		name := slotFileName(dir, i)
		err := files[i].Allocate(int64(l.fileSlots(i)) * l.slotBytes)
		var sparse *SparseError
		if errors.As(err, &sparse) {
			holes += sparse.Holes
			return nil
		}
		if err != nil {
			return fmt.Errorf("kvtier: disk: allocate %q: %w", name, err)
		}
		return nil
	}
	for i := range files {
		if cur[i] <= int64(l.fileSlots(i))*l.slotBytes {
			if err := allocate(i); err != nil {
				closeAll(files)
				return nil, err
			}
		}
	}
	if holes > 0 {
		if err := checkHoles(fsys, dir, holes, log); err != nil {
			closeAll(files)
			return nil, err
		}
	}
	for i := range files {
		if keep := int64(l.fileSlots(i)) * l.slotBytes; cur[i] > keep {
			n := countRecords(files[i], keep, cur[i], l.slotBytes)
			if err := allocate(i); err != nil {
				closeAll(files)
				return nil, err
			}
			o.cut += n
			if n > 0 {
				log.Info("kvtier: disk: cut a slot file to a smaller capacity, with its records past the cut",
					zap.String("file", slotFileName(dir, i)), zap.Int("records", n))
			}
		}
	}
	return files, nil
}

// countRecords returns how many slots of f in [from, to), one every
// slotBytes, begin with a record's header of any fingerprint or geometry: what
// a shrinking Open is about to cut away, for its report. A header it cannot
// read counts as none.
func countRecords(f File, from, to, slotBytes int64) int {
	buf := AlignedBuffer(BlockSize)
	var rec record
	n := 0
	for off := from; off+BlockSize <= to; off += slotBytes {
		if readFull(f, buf, off) == nil && decodeHeader(buf, &rec) == headerValid {
			n++
		}
	}
	return n
}

// checkHoles refuses (ErrInsufficientSpace) holes the file system's free
// space does not cover, and warns of those it does: writes into them may
// still fail with ENOSPC if others fill the file system.
func checkHoles(fsys FS, dir string, holes int64, log *zap.Logger) error {
	sr, ok := fsys.(SpaceReporter)
	if !ok {
		log.Warn("kvtier: disk: file system cannot reserve space and reports no free space; writes may fail with ENOSPC",
			zap.String("dir", dir), zap.Int64("holes", holes))
		return nil
	}
	free, err := sr.FreeBytes(dir)
	if err != nil {
		return fmt.Errorf("kvtier: disk: free space of %q: %w", dir, err)
	}
	if free < holes {
		return fmt.Errorf("%w: the file system under %q cannot preallocate and has %d bytes free, the slot files need %d more",
			ErrInsufficientSpace, dir, free, holes)
	}
	log.Warn("kvtier: disk: file system cannot reserve space; slot files are sparse and writes may fail with ENOSPC if others fill it",
		zap.String("dir", dir), zap.Int64("holes", holes), zap.Int64("free", free))
	return nil
}

// probeDirect checks that aligned O_DIRECT transfers work by reading the
// first block and writing the same bytes back, which changes nothing on
// disk even if interrupted.
func probeDirect(f File) error {
	buf := AlignedBuffer(BlockSize)
	if _, err := f.ReadAt(buf, 0); err != nil {
		return fmt.Errorf("kvtier: disk: O_DIRECT probe read: %w", err)
	}
	if _, err := f.WriteAt(buf, 0); err != nil {
		return fmt.Errorf("kvtier: disk: O_DIRECT probe write: %w", err)
	}
	return nil
}

func closeAll(files []File) error {
	var errs []error
	for _, f := range files {
		if err := f.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
