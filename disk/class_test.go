package disk

import (
	"bytes"
	"testing"

	"github.com/kvtier/kvtier/policy"
)

// hintLog is a policy that reads hints: an LRU that records, by key, the
// Hint each AddHint gave and which keys came by plain Add.
type hintLog struct {
	policy.Policy
	hints map[uint64]policy.Hint
	plain map[uint64]bool
}

func (l *hintLog) Add(k uint64)                       { l.plain[k] = true; l.Policy.Add(k) }
func (l *hintLog) AddHint(k uint64, h policy.Hint)    { l.hints[k] = h; l.Policy.Add(k) }
func (l *hintLog) AccessHint(k uint64, _ policy.Hint) { l.Policy.Access(k) }

// TestWriteClassReachesPolicy: a write that lands tells a policy that
// reads hints the block's class (Meta.Class); a block of no class is
// added plainly. The class is not recorded: the block reads back, and a
// reopened store's records have none.
func TestWriteClassReachesPolicy(t *testing.T) {
	cfg := testConfig(t, 4)
	s, _ := mustOpen(t, cfg)
	pol, err := policy.New(policy.LRU, 4)
	if err != nil {
		t.Fatal(err)
	}
	log := &hintLog{Policy: pol, hints: map[uint64]policy.Hint{}, plain: map[uint64]bool{}}
	s.pol = log // the store holds no block yet

	m := metaFor(1)
	m.Class = 5
	if _, _, err := s.WriteSync(m, payloadFor(1, testPayload)); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, s, 2)
	checkInv(t, s)
	// The class is not in the record: the read's check of the header
	// against the index leaves it out (it failed every classed read).
	buf := AlignedBuffer(testPayload)
	if _, n, err := s.ReadSyncDigest(1, digestFor(1), buf); err != nil || !bytes.Equal(buf[:n], payloadFor(1, testPayload)) {
		t.Fatalf("read of the classed block 1: %d bytes, %v", n, err)
	}
	if h, ok := log.hints[1]; !ok || h != (policy.Hint{Class: 5}) {
		t.Fatalf("block 1 reached the policy with hint %+v (hinted: %v), want Class 5", h, ok)
	}
	if _, ok := log.hints[2]; ok || !log.plain[2] {
		t.Fatalf("block 2, of no class, reached the policy with hint %+v, want a plain Add", log.hints[2])
	}
	if n := s.Stats().ClassHints; n != 1 {
		t.Fatalf("%d class hints counted, want 1", n)
	}
	mustClose(t, s)

	s, _ = mustOpen(t, cfg)
	defer mustClose(t, s)
	if got, ok := s.Meta(1); !ok || got.Class != 0 {
		t.Fatalf("reopened block 1: %+v (found: %v), want class 0", got, ok)
	}
}
