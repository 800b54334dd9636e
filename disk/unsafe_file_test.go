package disk

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestSymlinkedSlotFileRefused(t *testing.T) {
	cfg := testConfig(t, 4)
	target := filepath.Join(t.TempDir(), "victim")
	want := []byte("precious bytes that must survive")
	if err := os.WriteFile(target, want, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, slotFileName(cfg.Dir, 0)); err != nil {
		t.Fatal(err)
	}
	for _, noDirect := range []bool{false, true} {
		cfg.NoDirectIO = noDirect
		_, _, err := Open(cfg)
		wantErr(t, err, ErrUnsafeFile)
		got, rerr := os.ReadFile(target)
		if rerr != nil || !bytes.Equal(got, want) {
			t.Fatalf("symlink target changed: %q, %v", got, rerr)
		}
		fi, _ := os.Stat(target)
		if fi.Mode().Perm() != 0o644 {
			t.Fatalf("symlink target's mode changed to %v", fi.Mode().Perm())
		}
	}
	// The failed Open released the lock.
	if err := os.Remove(slotFileName(cfg.Dir, 0)); err != nil {
		t.Fatal(err)
	}
	s, _ := mustOpen(t, cfg)
	mustClose(t, s)
}

func TestSymlinkedDirAndLockRefused(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "store")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, 4)
	cfg.Dir = link
	_, _, err := Open(cfg)
	wantErr(t, err, ErrUnsafeFile)

	cfg = testConfig(t, 4)
	if err := os.Symlink(filepath.Join(t.TempDir(), "elsewhere"), filepath.Join(cfg.Dir, lockFileName)); err != nil {
		t.Fatal(err)
	}
	_, _, err = Open(cfg)
	wantErr(t, err, ErrUnsafeFile)
}

func TestHardLinkedSlotFileRefused(t *testing.T) {
	cfg := testConfig(t, 4)
	other := filepath.Join(cfg.Dir, "other")
	if err := os.WriteFile(other, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(other, slotFileName(cfg.Dir, 0)); err != nil {
		t.Fatal(err)
	}
	_, _, err := Open(cfg)
	wantErr(t, err, ErrUnsafeFile)
	if b, _ := os.ReadFile(other); string(b) != "x" {
		t.Fatalf("hard-linked file changed: %q", b)
	}
}

func TestLoosePermissionsTightened(t *testing.T) {
	cfg := testConfig(t, 4)
	cfg.Files = 2
	if err := os.Chmod(cfg.Dir, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{slotFileName(cfg.Dir, 0), filepath.Join(cfg.Dir, lockFileName)} {
		if err := os.WriteFile(name, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(name, 0o644); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	s, _ := mustOpen(t, cfg)
	defer mustClose(t, s)
	fi, err := os.Stat(cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v, want 0700", fi.Mode().Perm())
	}
	for _, name := range []string{slotFileName(cfg.Dir, 0), slotFileName(cfg.Dir, 1), filepath.Join(cfg.Dir, lockFileName)} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
}
