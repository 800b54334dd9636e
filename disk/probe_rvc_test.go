package disk

import (
	"testing"
)

// Probe (review rvC): PlanWrite evicts a victim and leaves its whole header
// in the slot until the new write's header lands. If the process crashes
// before that (the write still queued behind the workers, or its payload
// landed and its header not yet), Open indexes the victim again, even
// though, meanwhile, the victim was written elsewhere and removed, and the
// removal was acknowledged as durable (RemoveOp zeroed its header). The
// failed-write variant is covered by TestFailedWriteCannotResurrectRemovedBlock;
// a crash is the same hole without the scrub.
func TestProbeRvCCrashBeforeWriteResurrectsRemovedVictim(t *testing.T) {
	for _, name := range []string{"not-started"} { // the write never reached a worker before the crash
		t.Run(name, func(t *testing.T) {
			cfg, _ := faultConfig(t, 3, true)
			s, _ := mustOpen(t, cfg)
			for h := uint64(1); h <= 3; h++ {
				mustWrite(t, s, h)
			}
			op, err := s.PlanWrite(metaFor(9))
			if err != nil {
				t.Fatal(err)
			}
			v, ok := op.Victim()
			if !ok {
				t.Fatal("no victim")
			}
			other := uint64(1)
			if other == v.Hash {
				other = 2
			}
			if err := s.RemoveSync(other); err != nil {
				t.Fatal(err)
			}
			mustWrite(t, s, v.Hash) // the victim again, in another slot
			if err := s.RemoveSync(v.Hash); err != nil {
				t.Fatal(err) // acknowledged: its header is zeroed
			}
			checkInv(t, s)
			s.crash() // op 9 never completed
			s, rep := mustOpen(t, cfg)
			defer mustClose(t, s)
			if s.Contains(v.Hash) {
				dst := AlignedBuffer(testPayload)
				_, _, rerr := s.ReadSyncDigest(v.Hash, digestFor(v.Hash), dst)
				t.Fatalf("block %d, removed (durably) before the crash, is back after Open (report %+v); read: %v", v.Hash, rep, rerr)
			}
		})
	}
}
