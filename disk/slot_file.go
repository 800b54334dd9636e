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
func openSlotFiles(fsys FS, dir string, l layout, noDirect bool, log *zap.Logger) ([]File, IOMode, error) {
	created := make(map[string]bool)
	files, mode, err := openSlotFilesOnce(fsys, dir, l, noDirect, log, created)
	if err != nil {
		removeCreated(fsys, created, log)
		return nil, 0, err
	}
	return files, mode, nil
}

func openSlotFilesOnce(fsys FS, dir string, l layout, noDirect bool, log *zap.Logger, created map[string]bool) ([]File, IOMode, error) {
	if !noDirect {
		files, err := openAll(fsys, dir, l, true /* direct */, log, created)
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
	files, err := openAll(fsys, dir, l, false /* direct */, log, created)
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

// openAll opens and sizes every slot file. Where the file system cannot
// reserve blocks it checks that the free space covers the holes left, and
// refuses (ErrInsufficientSpace) otherwise: a sparse file larger than the
// free space would fail writes with ENOSPC later. It adds to created the
// name of every file it found empty (it created it, or it held nothing).
func openAll(fsys FS, dir string, l layout, direct bool, log *zap.Logger, created map[string]bool) ([]File, error) {
	files := make([]File, 0, l.files)
	var holes int64
	for i := range l.files {
		name := slotFileName(dir, i)
		f, err := fsys.OpenFile(name, direct)
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("kvtier: disk: open %q (direct=%t): %w", name, direct, err)
		}
		files = append(files, f)
		if size, err := f.Size(); err != nil {
			closeAll(files)
			return nil, fmt.Errorf("kvtier: disk: size of %q: %w", name, err)
		} else if size == 0 {
			created[name] = true
		}
		err = f.Allocate(int64(l.fileSlots(i)) * l.slotBytes)
		var sparse *SparseError
		if errors.As(err, &sparse) {
			holes += sparse.Holes
			continue
		}
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("kvtier: disk: allocate %q: %w", name, err)
		}
	}
	if holes == 0 {
		return files, nil
	}
	sr, ok := fsys.(SpaceReporter)
	if !ok {
		log.Warn("kvtier: disk: file system cannot reserve space and reports no free space; writes may fail with ENOSPC",
			zap.String("dir", dir), zap.Int64("holes", holes))
		return files, nil
	}
	free, err := sr.FreeBytes(dir)
	if err != nil {
		closeAll(files)
		return nil, fmt.Errorf("kvtier: disk: free space of %q: %w", dir, err)
	}
	if free < holes {
		closeAll(files)
		return nil, fmt.Errorf("%w: the file system under %q cannot preallocate and has %d bytes free, the slot files need %d more",
			ErrInsufficientSpace, dir, free, holes)
	}
	log.Warn("kvtier: disk: file system cannot reserve space; slot files are sparse and writes may fail with ENOSPC if others fill it",
		zap.String("dir", dir), zap.Int64("holes", holes), zap.Int64("free", free))
	return files, nil
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
