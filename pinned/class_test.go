package pinned

import (
	"testing"

	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/policy"
)

// hintLog is a policy that reads hints: an LRU that records, by key, the
// Hint each AddHint gave and which keys came by plain Add.
type hintLog struct {
	policy.Policy
	hints map[Key]policy.Hint
	plain map[Key]bool
}

func newHintLog(t testing.TB, n int) *hintLog {
	t.Helper()
	pol, err := policy.New(policy.LRU, n)
	if err != nil {
		t.Fatal(err)
	}
	return &hintLog{Policy: pol, hints: map[Key]policy.Hint{}, plain: map[Key]bool{}}
}

func (l *hintLog) Add(k Key)                       { l.plain[k] = true; l.Policy.Add(k) }
func (l *hintLog) AddHint(k Key, h policy.Hint)    { l.hints[k] = h; l.Policy.Add(k) }
func (l *hintLog) AccessHint(k Key, _ policy.Hint) { l.Policy.Access(k) }

// usePolicy makes pol the order of p's resident slots, as New does with
// the one it builds (p must hold none yet).
func usePolicy(p *Pool, pol policy.Policy) {
	p.pol = pol
}

// TestTierOffloadClassReachesPolicy: the class the GPU gave an offloaded
// block (BlockChain.Class) is the Hint the pool's policy is told when the
// copy lands, and it goes down with the block when pinned memory drains
// it; a block with no class is added plainly.
func TestTierOffloadClassReachesPolicy(t *testing.T) {
	tr := newTestTier(t, 2, true)
	log := newHintLog(t, 2)
	usePolicy(tr.pool, log)
	req := offer(1, 2)
	req.Items[0].Chain = messages.BlockChain{Class: 5}
	tr.Offload(req, gpuPeer{})
	g := step(t, tr).Sends[0].Msg.(*messages.OffloadGrant)
	tr.OffloadDone(&messages.OffloadDone{Slots: g.Slots, Hashes: []uint64{1, 2}})
	step(t, tr)
	if h, ok := log.hints[1]; !ok || h != (policy.Hint{Class: 5}) {
		t.Fatalf("block 1 reached the policy with hint %+v (hinted: %v), want Class 5", h, ok)
	}
	if _, ok := log.hints[2]; ok || !log.plain[2] {
		t.Fatalf("block 2, of no class, reached the policy with hint %+v, want a plain Add", log.hints[2])
	}

	tr.Offload(offer(3, 4), gpuPeer{}) // full: both drain
	r := step(t, tr)
	if len(r.ToLower) != 1 {
		t.Fatalf("ready %+v, want one write below", r)
	}
	for _, it := range r.ToLower[0].(*messages.LowerWrite).Items {
		if want := map[uint64]uint8{1: 5, 2: 0}[it.Hash]; it.Class != want {
			t.Fatalf("block %d drained with class %d, want %d", it.Hash, it.Class, want)
		}
	}
}

// TestPoolCommitClass: CommitClass tells a policy that reads hints the
// class, and one that does not gets the key as from Commit.
func TestPoolCommitClass(t *testing.T) {
	p := newPool(t, 2, 64, policy.LRU)
	log := newHintLog(t, 2)
	usePolicy(p, log)
	s, err := p.Reserve(9)
	if err != nil {
		t.Fatal(err)
	}
	p.CommitClass(s, 3)
	mustCheck(t, p)
	if log.hints[9] != (policy.Hint{Class: 3}) || p.Stats().ClassHints != 1 {
		t.Fatalf("hint %+v, %d class hints counted, want Class 3 and 1", log.hints[9], p.Stats().ClassHints)
	}

	plain := newPool(t, 2, 64, policy.LRU) // LRU reads no hints
	s, err = plain.Reserve(9)
	if err != nil {
		t.Fatal(err)
	}
	plain.CommitClass(s, 3)
	mustCheck(t, plain)
	if _, ok := plain.Lookup(9); !ok || plain.Stats().ClassHints != 0 {
		t.Fatalf("committed block resident: %v, %d class hints counted, want none", ok, plain.Stats().ClassHints)
	}
}
