package disk

import (
	"errors"
	"os"
	"testing"
)

// TestOpenRefusesTooManySlots: a CapacityBytes of more than MaxSlots slots
// is refused with ErrInvalidConfig before any file is made. Slot numbers
// are int32, so such a store could not index its slots; Open went on to
// allocate the slot files (failing, or on a sparse file system making
// terabytes of them and then the slot table).
func TestOpenRefusesTooManySlots(t *testing.T) {
	dir := t.TempDir()
	s, _, err := Open(Config{Dir: dir, PayloadBytes: 1, CapacityBytes: (MaxSlots + 1) * SlotBytes(1)})
	if s != nil {
		_ = s.Close()
	}
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Open of %d slots: %v, want ErrInvalidConfig", int64(MaxSlots)+1, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a refused Open left %d entries in its directory", len(ents))
	}
}
