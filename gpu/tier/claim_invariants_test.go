package tier

import (
	"testing"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/messages"
)

// TestCheckInvariantsClaimHeads: the invariants walk reports, as an error,
// a claimHead entry that names no block: one left as noBlock after its
// sequence's last claim went (the map then grows with every sequence id
// ever freed unclassed), and one out of the pool's range (the walk indexed
// with it and panicked).
func TestCheckInvariantsClaimHeads(t *testing.T) {
	for _, c := range []struct {
		name string
		head blockpool.BlockID
	}{{"empty list kept", noBlock}, {"out of range", 1 << 20}, {"negative", -7}} {
		t.Run(c.name, func(t *testing.T) {
			tr := journalTier(t, 4, Config{})
			p := prompt(1, 2*bs)
			allocateClass(t, tr, 1, p, 0)
			commitOK(t, tr, messages.CommitItem{Seq: 1, Tokens: 2 * bs})
			if err := tr.CheckInvariants(); err != nil {
				t.Fatalf("before: %v", err)
			}
			tr.claimHead[99] = c.head
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("CheckInvariants panicked: %v", r)
					}
				}()
				err = tr.CheckInvariants()
			}()
			if err == nil {
				t.Fatalf("claimHead[99] = %d passed the invariants walk", c.head)
			}
		})
	}
}
