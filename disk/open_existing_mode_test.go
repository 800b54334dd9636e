package disk

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOpenExistingKeepsMode: OSFS.OpenExisting, which Open uses only to
// count the records of a slot file it is about to remove, leaves the file's
// permissions as OpenFile would (0600). It passed openPrivate a perm of 0,
// which chmods away every bit not in perm: each file it opened became mode
// 0000, and one Open then failed to remove (the directory not writable)
// kept its records behind a mode no non-root Open can open.
func TestOpenExistingKeepsMode(t *testing.T) {
	name := filepath.Join(t.TempDir(), "slot")
	if err := os.WriteFile(name, make([]byte, BlockSize), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := OSFS{}.OpenExisting(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	if mode := st.Mode().Perm(); mode != 0o600 {
		t.Fatalf("after OpenExisting the file's mode is %#o, want 0600", mode)
	}
}
