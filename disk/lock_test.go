package disk

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestSecondOpenIsLocked(t *testing.T) {
	cfg := testConfig(t, 4)
	s, _ := mustOpen(t, cfg)
	_, _, err := Open(cfg)
	wantErr(t, err, ErrLocked)
	var le *LockedError
	if !errors.As(err, &le) || le.Dir != cfg.Dir {
		t.Fatalf("error %v does not name %q", err, cfg.Dir)
	}
	mustClose(t, s)
	s, _ = mustOpen(t, cfg) // released by Close
	mustClose(t, s)
}

// The lock is on the directory itself: deleting the LOCK file does not let
// a second store in.
func TestLockSurvivesLockFileRemoval(t *testing.T) {
	cfg := testConfig(t, 4)
	s, _ := mustOpen(t, cfg)
	if err := os.Remove(filepath.Join(cfg.Dir, lockFileName)); err != nil {
		t.Fatal(err)
	}
	_, _, err := Open(cfg)
	wantErr(t, err, ErrLocked)
	mustClose(t, s)
	s, _ = mustOpen(t, cfg)
	mustClose(t, s)
}
