package actors

import "testing"

// TestDiskWriteKeepsClass: the disk actor writes a block with the class
// pinned memory gave it (LowerWriteItem.Class), which the store hands its
// policy as the write lands.
func TestDiskWriteKeepsClass(t *testing.T) {
	e := newDiskEnv(t, 0)
	m := writeMsg(1, 2)
	m.Items[0].Class = 5
	request[any](e, m)
	e.flush()
	e.stop() // the store is read here only once its actor is gone
	for h, want := range map[uint64]uint8{1: 5, 2: 0} {
		if got, ok := e.store.Meta(h); !ok || got.Class != want {
			t.Fatalf("block %d stored as %+v (found: %v), want class %d", h, got, ok, want)
		}
	}
}
