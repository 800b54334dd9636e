package kvtier

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvtier/kvtier/events"
	"github.com/kvtier/kvtier/messages"
)

// TestDiskActorStoppedForGood: protoactor stops an actor that keeps failing
// (10 restarts in 10 s). When that is the disk tier's, nothing waits for
// ever on it: the pinned tier's drains to it (sent after it stopped, so
// dead letters) are answered as not written, its blocks are no longer
// looked up, Flush and Close return, Stats says it is down, and Delete says
// its records could not be scrubbed. Before, the pinned actor dropped the
// dead letters: its slots never came back and Flush waited for ever.
func TestDiskActorStoppedForGood(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := newManager(t, diskConfig(t, t.TempDir()))
	a := toks(100, 4*bt)
	pushDown(t, m, a)
	// An orderly stop sends the same Terminated as protoactor's stop
	// after repeated failures; requests after it are dead letters alike.
	if err := m.system.Root.StopFuture(m.diskPID).Wait(); err != nil {
		t.Fatal(err)
	}
	for i := range 6 { // drains from pinned memory to the stopped disk
		o := toks(50000*(i+2), 8*bt)
		r, err := m.Allocate(ctx, AllocRequest{Seq: uint64(100 + i), Tokens: o})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, r)
		if err := commitFree(ctx, m, uint64(100+i)); err != nil {
			t.Fatal(err)
		}
		if err := m.Flush(ctx); err != nil {
			t.Fatalf("flush %d with the disk tier down: %v", i, err)
		}
	}
	r, err := m.Allocate(ctx, AllocRequest{Seq: 2, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	if r.Tokens.Of(Disk) != 0 {
		t.Errorf("allocation %+v: blocks served from a stopped disk tier", r.Tokens)
	}
	if out := wait(t, r); out.ValidTokens != r.Tokens.Of(GPU)+r.Tokens.Of(Pinned) {
		t.Errorf("outcome %+v for %+v", out, r.Tokens)
	}
	if err := m.Free(ctx, 2); err != nil {
		t.Fatal(err)
	}
	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Tier(Disk).Down || st.Tier(Pinned).Down {
		t.Errorf("stats: disk down %v, pinned down %v; want the disk alone down", st.Tier(Disk).Down, st.Tier(Pinned).Down)
	}
	if p, err := m.Exists(ctx, a, ""); err != nil || p.Tokens.Of(Disk) != 0 {
		t.Errorf("exists: %+v, %v", p, err)
	}
	if _, err := m.Delete(ctx, a, ""); !errors.Is(err, ErrNotDurable) || !errors.Is(err, ErrTierDown) {
		t.Errorf("delete with the disk tier down: %v, want ErrNotDurable wrapping ErrTierDown", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- m.Close(context.Background()) }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("close: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close (no deadline) hung with the disk tier down")
	}
}

// TestIndexAndPinnedActorsStoppedForGood: with the index's actor stopped,
// allocations no longer wait for lookups (the GPU serves its own blocks
// alone); with the pinned tier's stopped too, commits offer nothing below
// and Flush, Stats and Close return. Before, the allocation waited for a
// lookup answer that could not come.
func TestIndexAndPinnedActorsStoppedForGood(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := newManager(t, Config{GPUBlocks: 8, PinnedBytes: 1 << 20, Ingestion: IngestAll})
	a := toks(7, 2*bt)
	cycle := func(seq uint64, tokens []int64) AllocResult {
		t.Helper()
		r, err := m.Allocate(ctx, AllocRequest{Seq: seq, Tokens: tokens})
		if err != nil {
			t.Fatalf("allocate %d: %v", seq, err)
		}
		wait(t, r)
		writeBlocks(t, m, r.Blocks, tokens, "")
		if err := commitFree(ctx, m, seq); err != nil {
			t.Fatal(err)
		}
		return r
	}
	cycle(1, a)
	if err := m.system.Root.StopFuture(m.idxPID).Wait(); err != nil {
		t.Fatal(err)
	}
	cycle(2, toks(900, 8*bt)) // evicts a from the GPU
	if r := cycle(3, a); r.Tokens.Below() != 0 {
		t.Errorf("allocation with the index down: %+v, want nothing from below", r.Tokens)
	}
	if err := m.system.Root.StopFuture(m.pinPID).Wait(); err != nil {
		t.Fatal(err)
	}
	cycle(4, toks(300, 2*bt))
	if err := m.Flush(ctx); err != nil {
		t.Errorf("flush: %v", err)
	}
	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Tier(Pinned).Down || st.Tier(GPU).Down {
		t.Errorf("stats: pinned down %v, GPU down %v", st.Tier(Pinned).Down, st.Tier(GPU).Down)
	}
	if err := m.Close(ctx); err != nil {
		t.Errorf("close: %v", err)
	}
}

// TestEventsSeqWithAnActorOnItsWayDown: EventsSeq's barrier travels GPU,
// pinned, index, publisher; with any of the last three stopped for good it
// returns ErrTierDown instead of waiting for ever (context.Background()).
func TestEventsSeqWithAnActorOnItsWayDown(t *testing.T) {
	for _, which := range []string{"pinned", "index", "events"} {
		t.Run(which, func(t *testing.T) {
			m := newManager(t, Config{GPUBlocks: 8, PinnedBytes: 1 << 20,
				Events: &EventsConfig{Endpoint: "tcp://*:0"}})
			if _, _, err := m.EventsSeq(context.Background()); err != nil {
				t.Fatal(err)
			}
			pid := map[string]*actor.PID{"pinned": m.pinPID, "index": m.idxPID, "events": m.evPID}[which]
			if err := m.system.Root.StopFuture(pid).Wait(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { _, _, err := m.EventsSeq(context.Background()); done <- err }()
			select {
			case err := <-done:
				if !errors.Is(err, ErrTierDown) {
					t.Errorf("EventsSeq with the %s actor stopped: %v, want ErrTierDown", which, err)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("EventsSeq hung with the %s actor stopped", which)
			}
		})
	}
}

// TestFanOutNeverStopsForGood: the disk+remote fan-out restarts however
// often it fails (the pinned tier could not tell, were it gone, when the
// disk's and remote tier's I/O on the slots it lent them ended), and goes
// on serving; and Delete with the remote actor stopped says the chain may
// remain there.
func TestFanOutNeverStopsForGood(t *testing.T) {
	for name, rc := range remoteAddrs(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cfg := nodeConfig(rc, fmt.Sprintf("fanout-%d", rand.Uint64()), "m")
			dc := diskConfig(t, t.TempDir())
			cfg.DiskDir, cfg.DiskBytes = dc.DiskDir, dc.DiskBytes
			m := newManager(t, cfg)
			if m.lowPID == nil {
				t.Fatal("no fan-out with both a disk and a remote tier")
			}
			for range 15 { // past protoactor's 10 restarts in 10 s
				m.system.Root.Send(m.lowPID, (*messages.LowerWrite)(nil)) // a defect: the actor panics and restarts
			}
			a := toks(4000, 3*bt)
			computeOn(t, m, 1, a)
			if err := m.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case <-m.downOf(m.lowPID):
				t.Fatal("the fan-out stopped for good")
			default:
			}
			if st, err := m.Stats(ctx); err != nil || st.Tier(Disk).Down || st.Tier(Remote).Down {
				t.Fatalf("stats %+v, %v", st, err)
			}
			if err := m.system.Root.StopFuture(m.remPID).Wait(); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Delete(ctx, a, ""); !errors.Is(err, ErrNotDurable) || !errors.Is(err, ErrTierDown) {
				t.Errorf("delete with the remote actor stopped: %v, want ErrNotDurable wrapping ErrTierDown", err)
			}
		})
	}
}

// TestEventsFollowTheGPUWithATierBelowStoppedForGood: the GPU's changes
// reach the event publisher through the pinned actor and the index. With
// either stopped for good, what it held on the way was lost and what the
// GPU changes next would be too: the stream kept announcing GPU blocks
// evicted long before, never announced those committed since, and kept
// the pinned and disk blocks no lookup reaches any more. Now the GPU
// takes the way around the stopped actor, and says there that the tiers
// below hold nothing and which blocks it holds: after the churn the
// stream's residency is the GPU's, and nothing below it; also when the
// index, the way around a stopped pinned actor, stops in its turn.
func TestEventsFollowTheGPUWithATierBelowStoppedForGood(t *testing.T) {
	for _, which := range []string{"pinned", "index", "pinned then index"} {
		t.Run(which, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cfg := diskConfig(t, t.TempDir())
			cfg.Ingestion = IngestAll // committed blocks go down at once: the stream has CPU and STORAGE blocks
			cfg.DiskIngestion = IngestAll
			cfg.Events = &EventsConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://127.0.0.1:0"}
			m := newManager(t, cfg)
			run := func(seq uint64, tokens []int64) {
				t.Helper()
				r, err := m.Allocate(ctx, AllocRequest{Seq: seq, Tokens: tokens})
				if err != nil {
					t.Fatal(err)
				}
				wait(t, r)
				if err := commitFree(ctx, m, seq); err != nil {
					t.Fatal(err)
				}
			}
			_, replay := m.EventEndpoints()
			stream := func() map[events.Medium][]uint64 {
				t.Helper()
				f, err := events.FetchSnapshot(ctx, replay)
				if err != nil {
					t.Fatal(err)
				}
				v := events.NewView()
				if err := v.Reset(f.Seq, f.Payload); err != nil {
					t.Fatal(err)
				}
				return v.Residency()
			}
			run(1, toks(7, 4*bt))
			run(2, toks(500, 4*bt))
			barrier(t, m)
			if before := stream(); len(before[events.MediumCPU]) == 0 || len(before[events.MediumStorage]) == 0 {
				t.Fatalf("before the stop the stream holds %v: want blocks on CPU and STORAGE too", summary(before))
			}
			stop := func(pid *actor.PID) {
				t.Helper()
				if err := m.system.Root.StopFuture(pid).Wait(); err != nil {
					t.Fatal(err)
				}
			}
			stop(map[string]*actor.PID{"pinned": m.pinPID, "index": m.idxPID, "pinned then index": m.pinPID}[which])
			run(3, toks(900, 8*bt)) // evicts every block above from the GPU
			if which == "pinned then index" {
				// The GPU's changes now go by the index: stopped too, what
				// it held on the way is lost again.
				stop(m.idxPID)
				run(5, toks(2900, 8*bt))
			}
			run(4, toks(1900, 3*bt))
			if err := m.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			req := &messages.ResidencyQuery{Reply: make(chan map[Tier][]uint64, 1)}
			m.system.Root.Send(m.gpuPID, req)
			held := <-req.Reply
			gpu := slices.Sorted(slices.Values(held[GPU]))
			// A barrier down the GPU's way to the publisher, which the
			// Flush above put behind what the GPU sent (EventsSeq says
			// ErrTierDown with an actor on the usual way stopped): the
			// index forwards a sync to the publisher in order.
			way := m.evPID
			if which == "pinned" {
				way = m.idxPID
			}
			synced := make(chan messages.EventsSeq, 1)
			m.system.Root.Send(way, &messages.EventsSync{Reply: synced})
			select {
			case <-synced:
			case <-ctx.Done():
				t.Fatal("no answer to a sync sent to the publisher")
			}
			want := map[events.Medium][]uint64{events.MediumGPU: gpu}
			if got := stream(); !reflect.DeepEqual(got, want) {
				same := 0
				for _, h := range got[events.MediumGPU] {
					if _, ok := slices.BinarySearch(gpu, h); ok {
						same++
					}
				}
				t.Fatalf("with the %s actor stopped the stream holds %v (%d of its GPU blocks on the GPU), the GPU %d blocks and nothing below", which, summary(got), same, len(gpu))
			}
		})
	}
}
