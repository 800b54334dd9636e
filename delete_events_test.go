package kvtier

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/kvtier/kvtier/events"
	"github.com/kvtier/kvtier/messages"
)

// TestDeleteAnnouncesRemoteRemoval: a Delete that drops a chain from the
// shared tier says so on the event stream, as the writes that put it there
// did, so routers stop counting this node's remote blocks.
func TestDeleteAnnouncesRemoteRemoval(t *testing.T) {
	addr := os.Getenv("KVTIER_REDIS")
	if addr == "" {
		t.Skip(`no Redis: run eval "$(.ci/redis.sh start)" first (CI does)`)
	}
	ctx := context.Background()
	cfg := nodeConfig(&RemoteConfig{Addrs: []string{addr}}, fmt.Sprintf("del-ev-%d", rand.Uint64()), "m")
	cfg.Events = &EventsConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://*:0", Topic: "kv@test@model"}
	m := newManager(t, cfg)
	a := toks(7000, 3*bt)
	computeOn(t, m, 1, a)
	remoteHeld := func() int {
		t.Helper()
		if err := m.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if _, _, err := m.EventsSeq(ctx); err != nil {
			t.Fatal(err)
		}
		st, err := m.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Events.Resident[string(events.MediumRemote)]
	}
	if n := remoteHeld(); n != 3 {
		t.Fatalf("before Delete the stream says REMOTE holds %d blocks, want 3", n)
	}
	if _, err := m.Delete(ctx, a, ""); err != nil {
		t.Fatal(err)
	}
	if n := remoteHeld(); n != 0 {
		t.Fatalf("after Delete the stream still says REMOTE holds %d blocks", n)
	}
}

// TestDeleteAfterFanOutWrite: with disk and remote below, the pinned tier's
// writes go through a fan-out actor. A write of the chain still waiting
// there when Delete runs must reach the disk before the disk's delete, not
// land after it and be served again.
func TestDeleteAfterFanOutWrite(t *testing.T) {
	addr := os.Getenv("KVTIER_REDIS")
	if addr == "" {
		t.Skip(`no Redis: run eval "$(.ci/redis.sh start)" first (CI does)`)
	}
	ctx := context.Background()
	cfg := nodeConfig(&RemoteConfig{Addrs: []string{addr}}, fmt.Sprintf("del-fan-%d", rand.Uint64()), "m")
	cfg.DiskDir, cfg.DiskBytes = t.TempDir(), 1<<20
	m := newManager(t, cfg)
	if m.lowPID == nil {
		t.Fatal("no fan-out actor with disk and remote")
	}
	hold := make(chan error) // unbuffered: the fan-out blocks answering, as if descheduled
	m.system.Root.Send(m.lowPID, &messages.Flush{Reply: hold})
	a := toks(9000, 3*bt)
	r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r)
	writeBlocks(t, m, r.Blocks, a, "")
	if err := commitFree(ctx, m, 1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for { // pinned holds the chain: its write-through to the fan-out is queued
		res, err := m.Residency(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(res[Pinned]) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pinned never held the chain: %v", res)
		}
		time.Sleep(5 * time.Millisecond)
	}
	done := make(chan error, 1)
	go func() { _, err := m.Delete(ctx, a, ""); done <- err }()
	time.Sleep(200 * time.Millisecond) // Delete waits on the held fan-out
	<-hold
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := m.Residency(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lr, err := m.Lookup(ctx, LookupRequest{Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	if len(res[Disk]) != 0 || lr.Tokens.Below() != 0 {
		t.Fatalf("after Delete the disk holds %d blocks of the chain and Lookup finds %v", len(res[Disk]), lr.Tokens)
	}
}

// TestEventsSeqCoversGPUChanges: the sequence number EventsSeq returns
// covers a commit made before the call even while the pinned actor, which
// relays the GPU's changes, is busy.
func TestEventsSeqCoversGPUChanges(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Config{GPUBlocks: 48, PinnedBytes: 96 * 512,
		Events: &EventsConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://*:0", Topic: "kv@test@model"}})
	hold := make(chan error) // the pinned actor is busy
	m.system.Root.Send(m.pinPID, &messages.Flush{Reply: hold})
	a := toks(100, 3*bt)
	r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r)
	if err := m.Commit(ctx, 1, AllTokens); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		seq uint64
		ok  bool
		err error
	}
	got := make(chan answer, 1)
	go func() {
		seq, ok, err := m.EventsSeq(ctx)
		got <- answer{seq, ok, err}
	}()
	time.Sleep(100 * time.Millisecond)
	<-hold
	ans := <-got
	if ans.err != nil || !ans.ok {
		t.Fatal(ans.ok, ans.err)
	}
	_, replay := m.EventEndpoints()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	fs, err := events.Replay(rctx, replay, 0)
	if err != nil {
		t.Fatal(err)
	}
	v := events.NewView()
	for _, f := range fs {
		if f.Seq <= ans.seq {
			if err := v.Apply(f.Seq, f.Payload); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := len(v.Residency()[events.MediumGPU]); n != 3 {
		t.Fatalf("the batches up to EventsSeq's %d hold %d GPU blocks; the 3 committed before the call are not covered", ans.seq, n)
	}
}
