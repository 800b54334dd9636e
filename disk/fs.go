package disk

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// File is the handful of file operations the store performs. Every byte the
// store reads or writes goes through it, so tests can inject faults (see
// FaultFS). Implementations must allow concurrent ReadAt and WriteAt calls
// on distinct ranges, as *os.File does.
type File interface {
	// ReadAt and WriteAt follow io.ReaderAt and io.WriterAt: a count short
	// of len(p) comes with a non-nil error.
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	// Sync makes written data durable (fdatasync).
	Sync() error
	// Allocate makes the file exactly size bytes long, reserving the blocks
	// where the file system can (fallocate) and otherwise extending or
	// shrinking it (ftruncate).
	Allocate(size int64) error
	// Size returns the current length of the file.
	Size() (int64, error)
	Close() error
}

// VectoredReader is an optional File extension: one positioned read into
// several buffers (preadv). ReadOp.Execute uses it to fetch a header and
// its payload in a single I/O. A count short of the total comes with a
// non-nil error or is treated as a short read.
type VectoredReader interface {
	ReadvAt(bufs [][]byte, off int64) (int, error)
}

// FS opens files and locks directories. The nil Config.FS means OSFS.
type FS interface {
	// MkdirAll creates dir and its parents (mode 0700) if missing.
	MkdirAll(dir string) error
	// OpenFile opens name read-write, creating it with mode 0600 if
	// missing. With direct set it asks for O_DIRECT and fails (wrapping
	// unix.EINVAL) where the file system refuses it.
	OpenFile(name string, direct bool) (File, error)
	// Lock takes an exclusive, non-blocking lock on dir, returning an error
	// matching ErrLocked if someone else holds it. Closing the returned
	// Closer releases the lock.
	Lock(dir string) (io.Closer, error)
}

// lockFileName is the file in the store directory that carries the flock.
const lockFileName = "LOCK"

// OSFS is the real operating system file system.
type OSFS struct{}

var _ FS = OSFS{}

// MkdirAll implements FS.
func (OSFS) MkdirAll(dir string) error { return os.MkdirAll(dir, 0o700) }

// OpenFile implements FS.
func (OSFS) OpenFile(name string, direct bool) (File, error) {
	flags := os.O_RDWR | os.O_CREATE
	if direct {
		flags |= unix.O_DIRECT
	}
	f, err := os.OpenFile(name, flags, 0o600)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// Lock implements FS with flock(LOCK_EX|LOCK_NB) on dir/LOCK. flock locks
// belong to the open file description, so a second Lock from the same
// process fails as well.
func (OSFS) Lock(dir string) (io.Closer, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("kvtier: disk: open lock file: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &LockedError{Dir: dir, Err: err}
		}
		return nil, fmt.Errorf("kvtier: disk: flock %q: %w", dir, err)
	}
	return f, nil
}

type osFile struct{ f *os.File }

func (o osFile) ReadAt(p []byte, off int64) (int, error)  { return o.f.ReadAt(p, off) }
func (o osFile) WriteAt(p []byte, off int64) (int, error) { return o.f.WriteAt(p, off) }
func (o osFile) Close() error                             { return o.f.Close() }

func (o osFile) ReadvAt(bufs [][]byte, off int64) (int, error) {
	for {
		n, err := unix.Preadv(int(o.f.Fd()), bufs, off)
		if !errors.Is(err, unix.EINTR) {
			return n, err
		}
	}
}

func (o osFile) Sync() error {
	for {
		err := unix.Fdatasync(int(o.f.Fd()))
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

func (o osFile) Size() (int64, error) {
	fi, err := o.f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (o osFile) Allocate(size int64) error {
	cur, err := o.Size()
	if err != nil {
		return err
	}
	if cur > size {
		return o.f.Truncate(size)
	}
	if cur == size {
		return nil
	}
	for {
		err = unix.Fallocate(int(o.f.Fd()), 0, 0, size)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return o.f.Truncate(size)
	}
	return err
}
