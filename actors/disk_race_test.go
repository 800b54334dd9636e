package actors

import (
	"slices"
	"testing"
	"time"

	"github.com/kvtier/kvtier/messages"
)

// TestDiskStopWithDeletedWriteInFlight: a stop while a deleted block's write
// is still running scrubs the block itself (the workers are gone), answers
// the delete, and the block is not on disk at the next start.
func TestDiskStopWithDeletedWriteInFlight(t *testing.T) {
	e := newDiskEnv(t, 0)
	e.gate.armWrite()
	wf := e.sys.Root.RequestFuture(e.pid, writeMsg(7), testWait)
	recv(t, e.gate.entered)
	reply := make(chan *messages.QueryResult, 1)
	e.sys.Root.Send(e.pid, &messages.LowerQuery{Kind: messages.QueryDelete, Hashes: []uint64{7}, Reply: reply})
	e.stats()
	stopped := e.sys.Root.StopFuture(e.pid)
	time.Sleep(50 * time.Millisecond)
	e.gate.release <- struct{}{}
	if err := stopped.Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := wf.Result(); err != nil {
		t.Fatalf("write: %v", err)
	}
	select {
	case r := <-reply:
		if r.Deleted != 1 {
			t.Fatalf("delete %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the delete was never answered")
	}
	if err := e.sys.Root.StopFuture(e.index).Wait(); err != nil {
		t.Fatal(err)
	}
	e.start()
	defer e.stop()
	if got := headersOnDisk(t, e.dir); slices.Contains(got, 7) {
		t.Fatalf("deleted block 7 still on disk: %v", got)
	}
}

// TestDiskDeleteOfOtherChainSparesWriteInFlight: a Delete naming another
// chain's digest under the same hash leaves a block being written alone.
func TestDiskDeleteOfOtherChainSparesWriteInFlight(t *testing.T) {
	e := newDiskEnv(t, 0)
	defer e.stop()
	e.gate.armWrite()
	wf := e.sys.Root.RequestFuture(e.pid, writeMsg(7), testWait)
	recv(t, e.gate.entered)
	reply := make(chan *messages.QueryResult, 1)
	e.sys.Root.Send(e.pid, &messages.LowerQuery{Kind: messages.QueryDelete, Hashes: []uint64{7},
		Digests: [][32]byte{digestOf(8)}, Reply: reply})
	e.stats()
	e.gate.release <- struct{}{}
	res, err := wf.Result()
	if err != nil {
		t.Fatal(err)
	}
	if r := recv(t, reply); r.Deleted != 0 {
		t.Errorf("a delete of another chain reported %d deleted", r.Deleted)
	}
	if w := res.(*messages.LowerWriteDone).Written; !slices.Equal(w, []uint64{7}) {
		t.Errorf("Written %v, want [7]", w)
	}
	if _, done := e.read(7); !done.OK[0] {
		t.Errorf("block 7 removed by a delete of another chain")
	}
}

// TestDiskWriteAfterDeleteOfWriteInFlight: a Delete, then a new write of the
// same block while the first write is still running: the block is written
// (delete, then write), not lost on every tier.
func TestDiskWriteAfterDeleteOfWriteInFlight(t *testing.T) {
	e := newDiskEnv(t, 0)
	defer e.stop()
	e.gate.armWrite()
	first := e.sys.Root.RequestFuture(e.pid, writeMsg(7), testWait)
	recv(t, e.gate.entered)
	reply := make(chan *messages.QueryResult, 1)
	e.sys.Root.Send(e.pid, &messages.LowerQuery{Kind: messages.QueryDelete, Hashes: []uint64{7}, Reply: reply})
	second := e.sys.Root.RequestFuture(e.pid, writeMsg(7), testWait)
	e.stats()
	e.gate.release <- struct{}{}
	if _, err := first.Result(); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, reply); r.Deleted != 1 {
		t.Fatalf("delete %+v", r)
	}
	if _, err := second.Result(); err != nil { // it waited for the first (same block)
		t.Fatal(err)
	}
	if _, done := e.read(7); !done.OK[0] {
		t.Fatal("the block written after the delete is not on the disk: it is on no tier")
	}
	if r := e.query(messages.QueryExists, 7); r.Tokens.Of(messages.Disk) != 1 {
		t.Fatalf("the block written after the delete is not findable: %+v", r)
	}
}

// TestDiskNegativeTokensIsBadInput: an item with a negative token count is
// refused; the actor does not crash and restart (which reset its counters
// and dropped the request's other items).
func TestDiskNegativeTokensIsBadInput(t *testing.T) {
	e := newDiskEnv(t, 0)
	defer e.stop()
	e.write(1, 2)
	e.nextUpdate()
	bad := writeMsg(3, 5)
	bad.Items[0].Tokens = -1
	if res := request[*messages.LowerWriteDone](e, bad); !slices.Equal(res.Written, []uint64{5}) {
		t.Fatalf("Written %v, want the good item only", res.Written)
	}
	if s := e.stats(); s.Offloaded != 3 {
		t.Errorf("Offloaded %d, want 3: the actor restarted", s.Offloaded)
	}
}

// TestDiskWrittenOnlyWhatWasAnnounced: a block that landed and left the
// disk again before its request answered (deleted here; evicted by a later
// write's plan the same way) is not reported Written, since the index never
// heard of it and no BelowGone will ever correct the writer.
func TestDiskWrittenOnlyWhatWasAnnounced(t *testing.T) {
	e := newDiskEnv(t, 0)
	defer e.stop()
	e.gate.armWrite()
	w0 := e.sys.Root.RequestFuture(e.pid, writeMsg(8), testWait)
	recv(t, e.gate.entered)
	w1 := e.sys.Root.RequestFuture(e.pid, writeMsg(7, 8), testWait) // 8 waits for w0
	for e.query(messages.QueryExists, 7).Tokens.Of(messages.Disk) == 0 {
		time.Sleep(time.Millisecond)
	}
	if r := e.query(messages.QueryDelete, 7); r.Deleted != 1 {
		t.Fatalf("delete %+v", r)
	}
	e.gate.release <- struct{}{}
	if _, err := w0.Result(); err != nil {
		t.Fatal(err)
	}
	res, err := w1.Result()
	if err != nil {
		t.Fatal(err)
	}
	if w := res.(*messages.LowerWriteDone).Written; slices.Contains(w, 7) {
		t.Errorf("Written %v lists block 7, which the index never had", w)
	}
}
