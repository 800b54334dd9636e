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
	// Allocate makes the file exactly size bytes long and reserves its
	// blocks (fallocate). Where the file system cannot reserve blocks it
	// still sizes the file (ftruncate, leaving holes) and returns a
	// *SparseError saying how many bytes are holes.
	Allocate(size int64) error
	// Size returns the current length of the file.
	Size() (int64, error)
	Close() error
}

// VectoredWriter is an optional File extension: one positioned write from
// several buffers (pwritev). WriteOp.Execute uses it, without Config.Sync,
// to write a small payload and its header in a single I/O. A count short of
// the total comes with a non-nil error or is treated as a short write.
type VectoredWriter interface {
	WritevAt(bufs [][]byte, off int64) (int, error)
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
	// unix.EINVAL) where the file system refuses it. OSFS refuses, with an
	// error matching ErrUnsafeFile, a name that is a symbolic link or not a
	// private regular file (see OSFS).
	OpenFile(name string, direct bool) (File, error)
	// Lock takes an exclusive, non-blocking lock on dir, returning an error
	// matching ErrLocked if someone else holds it. Closing the returned
	// Closer releases the lock.
	Lock(dir string) (io.Closer, error)
}

// SpaceReporter is an optional FS extension: the bytes an unprivileged
// process may still allocate on the file system holding dir. Open uses it
// when the file system cannot reserve blocks (see SparseError).
type SpaceReporter interface {
	FreeBytes(dir string) (int64, error)
}

// Remover is an optional FS extension: Open removes through it the slot
// files it created when it then fails (a failed Open leaves no
// preallocated files behind). An FS without it leaves them.
type Remover interface {
	Remove(name string) error
}

// ExistingOpener is an optional FS extension: OpenExisting opens name for
// reading only, failing with an error matching fs.ErrNotExist where there is
// no such file: it never creates one, as OpenFile does. Open counts through
// it the records of the slot files a smaller Config.Files removes
// (OpenReport.Dropped[DropCapacity]); with an FS without it they go
// uncounted.
type ExistingOpener interface {
	OpenExisting(name string) (File, error)
}

// DirSyncer is an optional FS extension: Open makes the creation and
// removal of slot files durable through it under Config.Sync, as
// fdatasync makes a file's contents durable but not its name in the
// directory. An FS without it leaves directory entries to the file
// system's own schedule.
type DirSyncer interface {
	SyncDir(dir string) error
}

// lockFileName is the file in the store directory that carries the flock
// older versions of the store take. OSFS locks the directory itself and
// this file as well, so an old and a new store never share a directory.
const lockFileName = "LOCK"

// OSFS is the real operating system file system. It guards the store's
// files against planted links and loose permissions:
//
//   - every open uses O_NOFOLLOW: a symbolic link in place of Dir, LOCK or
//     a slot file is refused (ErrUnsafeFile), so the store never truncates
//     or writes a link's target;
//   - Dir must be a directory and every file a regular file with a single
//     link, all owned by the process's effective uid; anything else is
//     refused (ErrUnsafeFile);
//   - permissions are tightened rather than refused: an existing Dir with
//     group or other bits ends up 0700, a slot or LOCK file 0600.
//
// Dir's parent directories are trusted: a directory writable by others on
// the path to Dir still lets them swap Dir between Open's checks.
type OSFS struct{}

var _ FS = OSFS{}

// MkdirAll implements FS.
func (OSFS) MkdirAll(dir string) error { return os.MkdirAll(dir, 0o700) }

// OpenFile implements FS.
func (OSFS) OpenFile(name string, direct bool) (File, error) {
	flags := unix.O_RDWR | unix.O_CREAT
	if direct {
		flags |= unix.O_DIRECT
	}
	f, err := openPrivate(unix.AT_FDCWD, name, name, flags, unix.S_IFREG, 0o600)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// OpenExisting implements ExistingOpener, with OpenFile's checks (a
// private regular file, no link) and its 0600: openPrivate takes away the
// bits perm lacks, so a perm of 0 would leave the file mode 0000.
func (OSFS) OpenExisting(name string) (File, error) {
	f, err := openPrivate(unix.AT_FDCWD, name, name, unix.O_RDONLY, unix.S_IFREG, 0o600)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// Remove implements Remover. It unlinks name itself, never the target of
// a link planted in its place.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// SyncDir implements DirSyncer with fsync on the directory. It opens dir
// read-only and checks nothing else: Open syncs the store directory's
// parent too, whose owner and mode are not the store's.
func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// FreeBytes implements SpaceReporter with statfs: the blocks available to
// unprivileged users.
func (OSFS) FreeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// Lock implements FS with flock(LOCK_EX|LOCK_NB) on the directory itself,
// which no one can unlink from under the store, and on dir/LOCK for older
// versions that lock only that file. flock locks belong to the open file
// description, so a second Lock from the same process fails as well.
func (OSFS) Lock(dir string) (io.Closer, error) {
	d, err := openPrivate(unix.AT_FDCWD, dir, dir, unix.O_RDONLY|unix.O_DIRECTORY, unix.S_IFDIR, 0o700)
	if err != nil {
		return nil, fmt.Errorf("kvtier: disk: open directory: %w", err)
	}
	if err := flock(d, dir); err != nil {
		_ = d.Close()
		return nil, err
	}
	name := filepath.Join(dir, lockFileName)
	lf, err := openPrivate(int(d.Fd()), lockFileName, name, unix.O_RDWR|unix.O_CREAT, unix.S_IFREG, 0o600)
	if err != nil {
		_ = d.Close()
		return nil, fmt.Errorf("kvtier: disk: open lock file: %w", err)
	}
	if err := flock(lf, dir); err != nil {
		_ = lf.Close()
		_ = d.Close()
		return nil, err
	}
	return dirLock{dir: d, file: lf}, nil
}

func flock(f *os.File, dir string) error {
	var err error
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EWOULDBLOCK):
		return &LockedError{Dir: dir, Err: err}
	default:
		return fmt.Errorf("kvtier: disk: flock %q: %w", dir, err)
	}
}

// dirLock holds the flocks of a store directory and its LOCK file.
type dirLock struct{ dir, file *os.File }

func (l dirLock) Close() error { return errors.Join(l.file.Close(), l.dir.Close()) }

// openPrivate opens path (relative to dirfd) with O_NOFOLLOW and checks
// that it has file type typ, is owned by the effective uid and, for a
// regular file, has one link; it then clears any permission bits beyond
// perm. name is the path errors report.
func openPrivate(dirfd int, path, name string, flags int, typ uint32, perm uint32) (*os.File, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Openat(dirfd, path, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		// O_NOFOLLOW reports a link as ELOOP, or as ENOTDIR with O_DIRECTORY.
		var st unix.Stat_t
		if unix.Fstatat(dirfd, path, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return nil, fmt.Errorf("%w: %q is a symbolic link", ErrUnsafeFile, name)
		}
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	if err := checkPrivate(f, name, typ, perm); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

func checkPrivate(f *os.File, name string, typ uint32, perm uint32) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return &os.PathError{Op: "fstat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != typ {
		return fmt.Errorf("%w: %q has file type %#o, want %#o", ErrUnsafeFile, name, st.Mode&unix.S_IFMT, typ)
	}
	if uid := uint32(os.Geteuid()); st.Uid != uid {
		return fmt.Errorf("%w: %q is owned by uid %d, not %d", ErrUnsafeFile, name, st.Uid, uid)
	}
	if typ == unix.S_IFREG && st.Nlink != 1 {
		return fmt.Errorf("%w: %q has %d hard links", ErrUnsafeFile, name, st.Nlink)
	}
	if st.Mode&0o7777&^perm != 0 {
		if err := unix.Fchmod(int(f.Fd()), st.Mode&0o7777&perm); err != nil {
			return &os.PathError{Op: "chmod", Path: name, Err: err}
		}
	}
	return nil
}

type osFile struct{ f *os.File }

func (o osFile) ReadAt(p []byte, off int64) (int, error)  { return o.f.ReadAt(p, off) }
func (o osFile) WriteAt(p []byte, off int64) (int, error) { return o.f.WriteAt(p, off) }
func (o osFile) Close() error                             { return o.f.Close() }

func (o osFile) ReadvAt(bufs [][]byte, off int64) (int, error) {
	for {
		n, err := unix.Preadv(int(o.f.Fd()), bufs, off)
		if !errors.Is(err, unix.EINTR) {
			return max(n, 0), err // the syscall's -1 on error: io's n >= 0
		}
	}
}

func (o osFile) WritevAt(bufs [][]byte, off int64) (int, error) {
	for {
		n, err := unix.Pwritev(int(o.f.Fd()), bufs, off)
		if !errors.Is(err, unix.EINTR) {
			return max(n, 0), err // the syscall's -1 on error: io's n >= 0
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
		if err := o.f.Truncate(size); err != nil {
			return err
		}
	}
	// Even at the right size: a file left sparse by an earlier run gets
	// its holes filled; on allocated ranges fallocate changes nothing.
	for {
		err = unix.Fallocate(int(o.f.Fd()), 0, 0, size)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) {
		return err
	}
	if cur < size {
		if err := o.f.Truncate(size); err != nil {
			return err
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(o.f.Fd()), &st); err != nil {
		return &os.PathError{Op: "fstat", Path: o.f.Name(), Err: err}
	}
	return &SparseError{Name: o.f.Name(), Holes: max(0, size-st.Blocks*512), Err: err}
}
