package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/kvtier/kvtier/disk"
)

// The demo's disk tiers live in a scratch directory, its disk root: a fresh
// directory named diskRootPrefix + random under -disk-dir or os.TempDir(),
// holding a marker file and a LOCK file that the demo flocks (as a disk tier
// flocks its own directory, with disk.OSFS.Lock) for as long as it runs. The
// demo removes it at exit; a demo killed with SIGKILL, by the OOM killer or a
// power cut leaves it behind, with everything its disk tier wrote (577 MB on
// the embedded sample).
//
// The next run removes such leftovers, and only those: a directory in the
// same parent whose name has the prefix, that is not a symbolic link, that
// belongs to the user running the demo, that holds a marker file with the
// exact marker text, and whose LOCK can be taken, so that no process is using
// it (a flock dies with its process). The lock is taken before the marker is
// written, so a marked root is locked for as long as its demo lives; a sweep
// holds the lock while it removes, so two sweeps never race on one root.
const (
	diskRootPrefix = "kvtier-demo-"
	markerName     = "KVTIER-DEMO"
	markerText     = "kvtier demo scratch directory: removed at exit, or by the next demo run once no process holds its LOCK\n"
)

// diskRoot is a demo's scratch directory, locked while the value is open.
type diskRoot struct {
	dir  string
	lock io.Closer
}

// newDiskRoot makes and locks a fresh disk root under parent and marks it as
// the demo's. The caller must Close it.
func newDiskRoot(parent string) (_ *diskRoot, err error) {
	dir, err := os.MkdirTemp(parent, diskRootPrefix)
	if err != nil {
		return nil, err
	}
	lock, err := disk.OSFS{}.Lock(dir)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	r := &diskRoot{dir: dir, lock: lock}
	if err := os.WriteFile(filepath.Join(dir, markerName), []byte(markerText), 0o600); err != nil {
		return nil, errors.Join(err, r.Close())
	}
	return r, nil
}

// Close removes the directory, then releases its lock.
func (r *diskRoot) Close() error {
	err := os.RemoveAll(r.dir)
	return errors.Join(err, r.lock.Close())
}

// removedDir is one stale disk root a sweep removed.
type removedDir struct {
	path  string
	bytes int64
}

// removeStaleRoots removes the stale disk roots directly under parent (see
// the comment on diskRootPrefix) and returns them. A directory it cannot
// inspect is not stale; the error is for failed removals, or for a parent it
// cannot list.
func removeStaleRoots(parent string) ([]removedDir, error) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return nil, err
	}
	var (
		removed []removedDir
		errs    []error
	)
	for _, e := range entries {
		// ReadDir reports a symbolic link as one, never as a directory.
		if !e.IsDir() || !strings.HasPrefix(e.Name(), diskRootPrefix) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		lock := lockIfStale(dir)
		if lock == nil {
			continue
		}
		size := treeBytes(dir)
		err := os.RemoveAll(dir)
		err = errors.Join(err, lock.Close())
		if err != nil {
			errs = append(errs, fmt.Errorf("removing stale demo directory %s: %w", dir, err))
			continue
		}
		removed = append(removed, removedDir{dir, size})
	}
	return removed, errors.Join(errs...)
}

// lockIfStale returns dir's lock, taken, if dir is a stale disk root, and nil
// otherwise.
func lockIfStale(dir string) io.Closer {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || !ownedByUs(fi) {
		return nil
	}
	mi, err := os.Lstat(filepath.Join(dir, markerName))
	if err != nil || !mi.Mode().IsRegular() || mi.Size() != int64(len(markerText)) {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(dir, markerName))
	if err != nil || string(b) != markerText {
		return nil
	}
	lock, err := disk.OSFS{}.Lock(dir)
	if err != nil { // disk.ErrLocked: a live demo's
		return nil
	}
	return lock
}

// ownedByUs reports whether fi belongs to the user running the demo.
func ownedByUs(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}

// treeBytes is the size of the regular files under dir, for the report.
func treeBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// openDiskRoot removes the stale disk roots under -disk-dir (or the system
// temporary directory), saying so on w, and makes this run's. -disk-dir must
// exist (parseFlags checks): the demo creates nothing there but its disk
// root, which it removes at exit.
func openDiskRoot(o options, w io.Writer) (*diskRoot, error) {
	parent := os.TempDir()
	if o.diskDir != "" {
		parent = filepath.Clean(o.diskDir)
	}
	removed, err := removeStaleRoots(parent)
	for _, r := range removed {
		fmt.Fprintf(w, "removed %s, left by a demo that did not exit cleanly (%s)\n", r.path, bytesIEC(r.bytes))
	}
	if err != nil {
		fmt.Fprintf(w, "demo: warning: %v\n", err) // someone else's problem: go on
	}
	return newDiskRoot(parent)
}
