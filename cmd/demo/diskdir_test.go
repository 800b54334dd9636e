package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kvtier/kvtier/disk"
)

// staleRoot makes a disk root as a killed demo leaves it: marked, holding a
// disk tier's directory with data, and unlocked.
func staleRoot(t *testing.T, parent string) string {
	t.Helper()
	r, err := newDiskRoot(parent)
	if err != nil {
		t.Fatal(err)
	}
	tier := filepath.Join(r.dir, "kvtier-demo-disk-1")
	if err := os.Mkdir(tier, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tier, "slots-0"), make([]byte, 1<<16), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.lock.Close(); err != nil { // the process died: its flock went with it
		t.Fatal(err)
	}
	return r.dir
}

// TestRemoveStaleRoots: a marked, unlocked demo directory is removed; a
// locked one, unmarked ones, a wrong marker, another prefix, a symbolic link
// to a stale root and a plain file are kept.
func TestRemoveStaleRoots(t *testing.T) {
	parent, elsewhere := t.TempDir(), t.TempDir()
	stale := staleRoot(t, parent)

	live, err := newDiskRoot(parent) // a demo running now
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()

	mkdir := func(name string, files map[string]string) string {
		t.Helper()
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for f, text := range files {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	kept := []string{
		live.dir,
		mkdir(diskRootPrefix+"unmarked", map[string]string{"LOCK": "", "data": "x"}), // e.g. an older demo's
		mkdir(diskRootPrefix+"badmarker", map[string]string{markerName: "something else\n"}),
		mkdir(diskRootPrefix+"dirmarker", nil),
		mkdir("other-"+diskRootPrefix, map[string]string{markerName: markerText}),
	}
	if err := os.Mkdir(filepath.Join(kept[3], markerName), 0o700); err != nil { // a marker that is a directory
		t.Fatal(err)
	}
	target := staleRoot(t, elsewhere)
	link := filepath.Join(parent, diskRootPrefix+"link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(parent, diskRootPrefix+"file")
	if err := os.WriteFile(file, []byte(markerText), 0o600); err != nil {
		t.Fatal(err)
	}
	kept = append(kept, link, target, file)

	removed, err := removeStaleRoots(parent)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0].path != stale || removed[0].bytes < 1<<16 {
		t.Errorf("removed %+v, want only %s (>= 64 KiB)", removed, stale)
	}
	if _, err := os.Lstat(stale); !os.IsNotExist(err) {
		t.Errorf("the stale root is still there: %v", err)
	}
	for _, p := range kept {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was not stale and is gone: %v", p, err)
		}
	}
	if _, err := (disk.OSFS{}).Lock(live.dir); !errors.Is(err, disk.ErrLocked) {
		t.Errorf("the live root lost its lock: %v", err)
	}

	// Once the live demo exits its root is gone too, and a second sweep
	// finds nothing.
	if err := live.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := removeStaleRoots(parent)
	if err != nil || len(again) != 0 {
		t.Errorf("second sweep: %+v, %v", again, err)
	}
	entries, _ := os.ReadDir(parent)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	want := []string{diskRootPrefix + "badmarker", diskRootPrefix + "dirmarker", diskRootPrefix + "file",
		diskRootPrefix + "link", diskRootPrefix + "unmarked", "other-" + diskRootPrefix}
	if !slices.Equal(names, want) {
		t.Errorf("left in the parent: %v, want %v", names, want)
	}
}
