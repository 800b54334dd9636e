package disk

import (
	"fmt"
	"io"
	"io/fs"
	"sync"

	"golang.org/x/sys/unix"
)

// FaultOp names the file operation a Fault applies to.
type FaultOp int

// The faultable operations.
const (
	FaultRead     FaultOp = iota + 1 // ReadAt and ReadvAt
	FaultWrite                       // WriteAt and WritevAt
	FaultSync                        // Sync
	FaultAllocate                    // Allocate (sizing a slot file at Open)
)

func (o FaultOp) String() string {
	switch o {
	case FaultRead:
		return "read"
	case FaultWrite:
		return "write"
	case FaultSync:
		return "sync"
	case FaultAllocate:
		return "allocate"
	default:
		return "FaultOp(?)"
	}
}

// Fault makes matching file calls fail.
type Fault struct {
	Op FaultOp
	// Match selects the calls hit, by file name, offset and length; nil
	// matches every call of Op.
	Match func(name string, off int64, n int) bool
	// Err is what a hit call returns, e.g. unix.EIO or unix.ENOSPC.
	Err error
	// Partial passes the first Partial bytes of a hit read or write (of
	// all its buffers, for ReadvAt and WritevAt: see there) through to the
	// file before failing: a short read or a torn write. For Allocate it
	// sizes the file to Partial bytes before failing, as a fallocate that
	// ran out of space part way leaves it.
	// Partial transfers that are not BlockSize multiples need buffered
	// I/O (FaultFS.NoDirect).
	Partial int
	// Times is how many calls the fault hits before it is spent; 0 means
	// every matching call.
	Times int
}

// IOCounts counts the calls that reached a FaultFS's files.
type IOCounts struct {
	Reads, Writes, Syncs    int64
	ReadBytes, WriteBytes   int64
	FailedReads, FailedSync int64
	FailedWrites            int64
	DirSyncs                int64 // SyncDir calls
}

// FaultFS wraps an FS, counts file calls and injects faults. It is safe for
// concurrent use, as Execute runs on worker goroutines. Tests in other
// packages may use it too.
type FaultFS struct {
	// FS is the wrapped file system; nil means OSFS.
	FS FS
	// NoDirect refuses O_DIRECT opens with EINVAL, forcing buffered I/O.
	NoDirect bool
	// NoFallocate makes Allocate act as on a file system without
	// fallocate: it sizes the file and returns a *SparseError counting the
	// whole file as holes.
	NoFallocate bool
	// Space, if set, answers FreeBytes instead of the wrapped FS.
	Space func(dir string) (int64, error)

	mu     sync.Mutex
	faults []*Fault
	counts IOCounts
}

var _ FS = (*FaultFS)(nil)

// Inject adds a fault; faults are tried in the order added.
func (f *FaultFS) Inject(ft Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = append(f.faults, &ft)
}

// Clear removes every fault.
func (f *FaultFS) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = nil
}

// Counts returns the call counts so far.
func (f *FaultFS) Counts() IOCounts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts
}

func (f *FaultFS) base() FS {
	if f.FS == nil {
		return OSFS{}
	}
	return f.FS
}

// MkdirAll implements FS.
func (f *FaultFS) MkdirAll(dir string) error { return f.base().MkdirAll(dir) }

// FreeBytes implements SpaceReporter: Space if set, else the wrapped FS's
// answer (an error if it reports none).
func (f *FaultFS) FreeBytes(dir string) (int64, error) {
	if f.Space != nil {
		return f.Space(dir)
	}
	if sr, ok := f.base().(SpaceReporter); ok {
		return sr.FreeBytes(dir)
	}
	return 0, fmt.Errorf("kvtier: disk: %T reports no free space: %w", f.base(), unix.ENOTSUP)
}

// Remove implements Remover with the wrapped FS's Remove (an error if it
// has none).
func (f *FaultFS) Remove(name string) error {
	if r, ok := f.base().(Remover); ok {
		return r.Remove(name)
	}
	return fmt.Errorf("kvtier: disk: %T cannot remove files: %w", f.base(), unix.ENOTSUP)
}

// SyncDir implements DirSyncer with the wrapped FS's SyncDir (nothing if
// it has none), counted in DirSyncs.
func (f *FaultFS) SyncDir(dir string) error {
	f.mu.Lock()
	f.counts.DirSyncs++
	f.mu.Unlock()
	if d, ok := f.base().(DirSyncer); ok {
		return d.SyncDir(dir)
	}
	return nil
}

// Lock implements FS.
func (f *FaultFS) Lock(dir string) (io.Closer, error) { return f.base().Lock(dir) }

// OpenFile implements FS.
func (f *FaultFS) OpenFile(name string, direct bool) (File, error) {
	if direct && f.NoDirect {
		return nil, unix.EINVAL
	}
	inner, err := f.base().OpenFile(name, direct)
	if err != nil {
		return nil, err
	}
	return &faultFile{fs: f, name: name, f: inner}, nil
}

// OpenExisting implements ExistingOpener over the base FS, with no faults:
// Open only counts records through it. A base without it has no such
// file.
func (f *FaultFS) OpenExisting(name string) (File, error) {
	if o, ok := f.base().(ExistingOpener); ok {
		return o.OpenExisting(name)
	}
	return nil, fs.ErrNotExist
}

// hit returns the fault for a call, if any, and counts the call.
func (f *FaultFS) hit(op FaultOp, name string, off int64, n int) *Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	var hit *Fault
	for i, ft := range f.faults {
		if ft.Op != op || (ft.Match != nil && !ft.Match(name, off, n)) {
			continue
		}
		hit = ft
		if ft.Times > 0 {
			ft.Times--
			if ft.Times == 0 {
				f.faults = append(f.faults[:i:i], f.faults[i+1:]...)
			}
		}
		break
	}
	switch op {
	case FaultRead:
		f.counts.Reads++
		if hit != nil {
			f.counts.FailedReads++
		}
	case FaultWrite:
		f.counts.Writes++
		if hit != nil {
			f.counts.FailedWrites++
		}
	case FaultSync:
		f.counts.Syncs++
		if hit != nil {
			f.counts.FailedSync++
		}
	}
	return hit
}

func (f *FaultFS) addBytes(op FaultOp, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if op == FaultRead {
		f.counts.ReadBytes += int64(n)
	} else {
		f.counts.WriteBytes += int64(n)
	}
}

type faultFile struct {
	fs   *FaultFS
	name string
	f    File
}

func (ff *faultFile) ReadAt(p []byte, off int64) (int, error) {
	return ff.transfer(FaultRead, ff.f.ReadAt, p, off)
}

func (ff *faultFile) WriteAt(p []byte, off int64) (int, error) {
	return ff.transfer(FaultWrite, ff.f.WriteAt, p, off)
}

func (ff *faultFile) transfer(op FaultOp, do func([]byte, int64) (int, error), p []byte, off int64) (int, error) {
	ft := ff.fs.hit(op, ff.name, off, len(p))
	if ft == nil {
		n, err := do(p, off)
		ff.fs.addBytes(op, n)
		return n, err
	}
	n := 0
	if k := min(ft.Partial, len(p)); k > 0 {
		var err error
		if n, err = do(p[:k], off); err != nil {
			return n, err
		}
		ff.fs.addBytes(op, n)
	}
	return n, ft.Err
}

// ReadvAt counts as one read of the total length at off. A Partial fault
// reads the first Partial bytes, across the buffers in order (a read torn
// inside the header or inside the payload), then fails.
func (ff *faultFile) ReadvAt(bufs [][]byte, off int64) (int, error) {
	total := 0
	for _, b := range bufs {
		total += len(b)
	}
	ft := ff.fs.hit(FaultRead, ff.name, off, total)
	if ft != nil {
		n, left := 0, min(ft.Partial, total)
		for _, b := range bufs {
			if left <= 0 {
				break
			}
			k, err := ff.f.ReadAt(b[:min(left, len(b))], off+int64(n))
			n += k
			left -= k
			if err != nil {
				ff.fs.addBytes(FaultRead, n)
				return n, err
			}
		}
		ff.fs.addBytes(FaultRead, n)
		return n, ft.Err
	}
	var n int
	var err error
	if v, ok := ff.f.(VectoredReader); ok {
		n, err = v.ReadvAt(bufs, off)
	} else {
		for _, b := range bufs {
			var k int
			k, err = ff.f.ReadAt(b, off+int64(n))
			n += k
			if err != nil {
				break
			}
		}
	}
	ff.fs.addBytes(FaultRead, n)
	return n, err
}

// WritevAt counts as one write of the total length at off. A Partial fault
// writes the first Partial bytes, across the buffers in order: a write torn
// inside the header or inside the payload. With no fault it passes the call
// to the file's own WritevAt, so the store's one pwritev stays one.
func (ff *faultFile) WritevAt(bufs [][]byte, off int64) (int, error) {
	total := 0
	for _, b := range bufs {
		total += len(b)
	}
	ft := ff.fs.hit(FaultWrite, ff.name, off, total)
	if v, ok := ff.f.(VectoredWriter); ok && ft == nil {
		n, err := v.WritevAt(bufs, off)
		ff.fs.addBytes(FaultWrite, n)
		return n, err
	}
	limit := total
	if ft != nil {
		limit = min(ft.Partial, total)
	}
	n := 0
	for _, b := range bufs {
		if n >= limit {
			break
		}
		b = b[:min(len(b), limit-n)]
		k, err := ff.f.WriteAt(b, off+int64(n))
		n += k
		if err == nil && k < len(b) {
			err = io.ErrShortWrite
		}
		if err != nil {
			ff.fs.addBytes(FaultWrite, n)
			return n, err
		}
	}
	ff.fs.addBytes(FaultWrite, n)
	if ft != nil {
		return n, ft.Err
	}
	return n, nil
}

func (ff *faultFile) Sync() error {
	if ft := ff.fs.hit(FaultSync, ff.name, 0, 0); ft != nil {
		return ft.Err
	}
	return ff.f.Sync()
}

func (ff *faultFile) Allocate(size int64) error {
	if ft := ff.fs.hit(FaultAllocate, ff.name, 0, int(size)); ft != nil {
		if ft.Partial > 0 {
			if err := ff.f.Allocate(int64(ft.Partial)); err != nil {
				return err
			}
		}
		return ft.Err
	}
	if err := ff.f.Allocate(size); err != nil || !ff.fs.NoFallocate {
		return err
	}
	return &SparseError{Name: ff.name, Holes: size, Err: unix.EOPNOTSUPP}
}
func (ff *faultFile) Size() (int64, error) { return ff.f.Size() }
func (ff *faultFile) Close() error         { return ff.f.Close() }
