package kvtier

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/events"
)

func eventsManager(t *testing.T, dir string) *Manager {
	t.Helper()
	return newManager(t, Config{GPUBlocks: 48, PinnedBytes: 96 * 512, DiskDir: dir, DiskBytes: 1 << 20,
		Events: &EventsConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://*:0", Topic: "kv@test@model"}})
}

// churn runs clients that share prefixes, so blocks are hits, offloads,
// evictions and loads on every tier.
func churn(t *testing.T, m *Manager, clients, rounds, seed int) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, clients)
	for g := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				seq := uint64(seed*1_000_000 + g*1000 + i)
				stem := toks(((i+g)%6)*100, 3*bt)
				tail := toks(seed*10_000_000+g*100_000+i*10, 1+(i%3)*bt)
				r, err := m.Allocate(ctx, AllocRequest{Seq: seq, Tokens: append(stem, tail...), Salt: fmt.Sprint(g % 2)})
				if errors.Is(err, ErrNoSpace) {
					continue
				}
				if err != nil {
					errs[g] = err
					return
				}
				<-r.Ready.Done()
				if err := commitFree(ctx, m, seq); err != nil {
					errs[g] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// tiersByMedium is Manager.Residency keyed as the event stream names tiers.
func tiersByMedium(t *testing.T, m *Manager) map[events.Medium][]uint64 {
	t.Helper()
	res, err := m.Residency(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[events.Medium][]uint64{}
	for tier, hs := range res {
		if len(hs) > 0 {
			out[events.MediumOf(tier)] = hs
		}
	}
	return out
}

// collect receives live frames until ctx ends.
func collect(ctx context.Context, t *testing.T, pub string) <-chan events.Frame {
	t.Helper()
	sub, err := events.Subscribe(ctx, pub, "kv@")
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan events.Frame, 1<<16)
	go func() {
		defer sub.Close()
		for {
			topic, f, err := sub.Recv()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				time.Sleep(time.Millisecond) // a connection dropped: the socket reconnects
				continue
			}
			if topic != "kv@test@model" {
				panic("topic " + topic)
			}
			out <- f
		}
	}()
	return out
}

// barrier flushes m and returns the last sequence number published.
func barrier(t *testing.T, m *Manager) uint64 {
	t.Helper()
	ctx := context.Background()
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	seq, ok, err := m.EventsSeq(ctx)
	if err != nil || !ok {
		t.Fatalf("EventsSeq: %v %v", ok, err)
	}
	return seq
}

// follow applies live frames to v until it reaches seq; on a gap it does
// what a router does: replays from the batch after the last it applied
// (or, with snapshot, resets from a snapshot). It returns the frames that
// arrived live and were applied, and the gaps met.
func follow(t *testing.T, v *events.View, live <-chan events.Frame, replay string, seq uint64, snapshot bool, drop func(uint64) bool) (applied, gaps int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resync := func() {
		gaps++
		if snapshot {
			f, err := events.FetchSnapshot(ctx, replay)
			if err != nil {
				t.Fatal(err)
			}
			if err := v.Reset(f.Seq, f.Payload); err != nil {
				t.Fatal(err)
			}
			return
		}
		last, _ := v.Seq()
		fs, err := events.Replay(ctx, replay, last+1)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			if err := v.Apply(f.Seq, f.Payload); err != nil {
				t.Fatal(err)
			}
		}
	}
	for {
		if s, ok := v.Seq(); ok && s >= seq {
			return applied, gaps
		}
		select {
		case f := <-live:
			if drop != nil && drop(f.Seq) {
				continue
			}
			before, _ := v.Seq()
			err := v.Apply(f.Seq, f.Payload)
			switch {
			case errors.Is(err, events.ErrGap):
				resync()
			case err != nil:
				t.Fatal(err)
			default:
				if after, _ := v.Seq(); after != before {
					applied++ // not a batch the view had already (replayed)
				}
			}
		case <-time.After(200 * time.Millisecond):
			resync() // the live stream is behind or the subscriber joined late
		case <-ctx.Done():
			s, _ := v.Seq()
			t.Fatalf("stuck at seq %d of %d", s, seq)
		}
	}
}

// TestEventsLateSubscriberMatchesTiers: a router that joins after the
// Manager has been busy replays from 0, follows the live stream while the
// Manager keeps working, and at a Flush barrier holds exactly what each
// tier holds — GPU blocks, pinned blocks, disk records.
func TestEventsLateSubscriberMatchesTiers(t *testing.T) {
	m := eventsManager(t, t.TempDir())
	churn(t, m, 4, 30, 1)
	pub, replay := m.EventEndpoints()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	subCtx, subCancel := context.WithCancel(ctx)
	live := collect(subCtx, t, pub)
	// A SUB socket joins asynchronously: work until a batch arrives live,
	// so the churn below is followed live, not only replayed. Each probe
	// computes two new blocks, so it publishes a batch. The replay comes
	// after: it covers every probe, so the churn's first live batch follows
	// the view's last (had the replay come first, a SUB that joined after
	// the first probe made the first live batch a gap, whose resync replayed
	// the churn too, and no live batch was left to apply).
	joined := time.Now().Add(30 * time.Second)
	for i := 0; len(live) == 0; i++ {
		if time.Now().After(joined) {
			t.Fatalf("no batch arrived live in 30 s (%d probes)", i)
		}
		seq := uint64(900_000_000 + i)
		r, err := m.Allocate(ctx, AllocRequest{Seq: seq, Tokens: toks(900_000_000+i*100, 2*bt)})
		if err != nil {
			t.Fatal(err)
		}
		<-r.Ready.Done()
		if err := commitFree(ctx, m, seq); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	v := events.NewView()
	fs, err := events.Replay(ctx, replay, 0)
	if err != nil || len(fs) == 0 {
		t.Fatalf("replay from 0: %d frames, %v", len(fs), err)
	}
	// The run's numbers start from the clock (above any earlier run's),
	// and its first batch clears what an earlier run announced.
	if b, err := events.DecodeBatch(fs[0].Payload); err != nil || fs[0].Seq == 0 || len(b.Events) == 0 || b.Events[0].Kind != events.AllBlocksCleared {
		t.Fatalf("replay from 0 starts at %d with %+v, %v; want the run's AllBlocksCleared numbered from the clock", fs[0].Seq, b, err)
	}
	for _, f := range fs {
		if err := v.Apply(f.Seq, f.Payload); err != nil {
			t.Fatal(err)
		}
	}
	defer subCancel()
	churn(t, m, 4, 30, 2)
	applied, gaps := follow(t, v, live, replay, barrier(t, m), false, nil)
	want := tiersByMedium(t, m)
	if len(want[events.MediumGPU]) == 0 || len(want[events.MediumCPU]) == 0 || len(want[events.MediumStorage]) == 0 {
		t.Fatalf("test setup: a tier is empty: %v", want)
	}
	if got := v.Residency(); !reflect.DeepEqual(got, want) {
		t.Fatalf("the subscriber's view differs from the tiers:\n view %v\ntiers %v", summary(got), summary(want))
	}
	if applied == 0 {
		t.Fatal("no live batch was applied: the test only exercised replay")
	}
	t.Logf("%d live batches applied, %d resyncs", applied, gaps)
}

// TestEventsSnapshotAfterDrops: a subscriber that loses every 7th batch
// resynchronises from snapshots and ends with the tiers' residency.
func TestEventsSnapshotAfterDrops(t *testing.T) {
	m := eventsManager(t, t.TempDir())
	pub, replay := m.EventEndpoints()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	live := collect(ctx, t, pub)
	v := events.NewView()
	churn(t, m, 4, 40, 3)
	_, gaps := follow(t, v, live, replay, barrier(t, m), true, func(seq uint64) bool { return seq%7 == 3 })
	if gaps == 0 {
		t.Fatal("no gap was met: the drops did not happen")
	}
	if got, want := v.Residency(), tiersByMedium(t, m); !reflect.DeepEqual(got, want) {
		t.Fatalf("after %d snapshots the view differs:\n view %v\ntiers %v", gaps, summary(got), summary(want))
	}
}

// TestEventsRestartAnnouncesDisk: a node that restarts on its disk
// publishes AllBlocksCleared, then its disk records as STORAGE stores; a
// snapshot says the same.
func TestEventsRestartAnnouncesDisk(t *testing.T) {
	dir := t.TempDir()
	m := eventsManager(t, dir)
	churn(t, m, 2, 40, 4)
	barrier(t, m)
	disk := tiersByMedium(t, m)[events.MediumStorage]
	if len(disk) == 0 {
		t.Fatal("test setup: nothing on disk")
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	m = eventsManager(t, dir)
	seq := barrier(t, m)
	_, replay := m.EventEndpoints()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fs, err := events.Replay(ctx, replay, 0)
	if err != nil || len(fs) == 0 || fs[len(fs)-1].Seq != seq {
		t.Fatalf("replay: %d frames to seq %d, %v", len(fs), seq, err)
	}
	b, err := events.DecodeBatch(fs[0].Payload)
	if err != nil || len(b.Events) != 1 || b.Events[0].Kind != events.AllBlocksCleared {
		t.Fatalf("first batch %+v, %v: want AllBlocksCleared", b, err)
	}
	v := events.NewView()
	for _, f := range fs {
		if err := v.Apply(f.Seq, f.Payload); err != nil {
			t.Fatal(err)
		}
	}
	want := tiersByMedium(t, m)
	if !reflect.DeepEqual(want[events.MediumStorage], disk) || !reflect.DeepEqual(v.Residency(), want) {
		t.Fatalf("after restart: view %v, tiers %v, disk before %d", summary(v.Residency()), summary(want), len(disk))
	}
	snap, err := events.FetchSnapshot(ctx, replay)
	if err != nil {
		t.Fatal(err)
	}
	sv := events.NewView()
	if err := sv.Reset(snap.Seq, snap.Payload); err != nil || snap.Seq != seq || !reflect.DeepEqual(sv.Residency(), want) {
		t.Fatalf("snapshot at %d (want %d): %v, %v", snap.Seq, seq, summary(sv.Residency()), err)
	}
}

// TestEventsOff: without Config.Events nothing is published and the API
// says so.
func TestEventsOff(t *testing.T) {
	m := newManager(t, Config{GPUBlocks: 8})
	if pub, replay := m.EventEndpoints(); pub != "" || replay != "" {
		t.Fatalf("endpoints %q %q", pub, replay)
	}
	if _, ok, err := m.EventsSeq(context.Background()); ok || err != nil {
		t.Fatalf("EventsSeq: %v %v", ok, err)
	}
	for _, bad := range []*EventsConfig{{}, {Endpoint: "tcp://*:0", Format: "xml"}, {Endpoint: "tcp://*:0", QueueSize: -1}} {
		if _, err := New(Config{GPUBlocks: 8, BlockTokens: bt, Events: bad}); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: %v, want ErrBadConfig", bad, err)
		}
	}
}

func summary(r map[events.Medium][]uint64) string {
	s := ""
	for _, md := range events.Mediums {
		s += fmt.Sprintf("%s:%d ", md, len(r[md]))
	}
	return s
}
