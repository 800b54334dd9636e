package disk

import (
	"errors"
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
