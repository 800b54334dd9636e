package stress

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/events"
)

// TestEventStreamGapless: the stress workload (many goroutines, shared stems
// across tenants, copies failing and running slow at random, pinned memory
// and disk) against a Manager publishing KV events, with a subscriber
// connected from the start. Every batch arrives, numbered without a gap,
// each decodes, and at the Flush barrier the residency the stream adds up
// to is what the tiers hold.
func TestEventStreamGapless(t *testing.T) {
	deadline(t)
	goroutines := envInt(t, "KVTIER_STRESS_GOROUTINES", 64) / 2
	ops := envInt(t, "KVTIER_STRESS_OPS", 100)
	ctx, cancel := context.WithTimeout(context.Background(), hangAfter)
	defer cancel()
	f := &faults{rng: rand.New(rand.NewPCG(5, 5)), failH2D: 5, slowH2D: 10, failD2H: 5, slowD2H: 10, slow: time.Millisecond}
	dev := newFaultyDevice(t, f)
	defer dev.Close()
	m := newManager(t, kvtier.Config{Device: dev, DiskDir: t.TempDir(), DiskBytes: 1 << 22, ReadDeadlineBase: time.Minute,
		Events: &kvtier.EventsConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://*:0", Topic: "kv@stress@tiny", Format: "array"}})
	defer m.Close(context.Background())
	pub, replay := m.EventEndpoints()
	sub, err := events.Subscribe(ctx, pub, "")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	frames := make(chan events.Frame, 1<<20)
	go func() {
		for {
			_, f, err := sub.Recv()
			if err != nil {
				close(frames)
				return
			}
			frames <- f
		}
	}()
	// The subscription is live once a batch published after it arrives:
	// publish (allocate and commit a block) until one does.
	w := &writers{}
	probe := newWorker(m, w, 0, tenants, 99)
	var first events.Frame
	for i := 0; ; i++ {
		if err := probe.round(ctx, 1); err != nil {
			t.Fatal(err)
		}
		select {
		case first = <-frames:
		case <-time.After(20 * time.Millisecond):
			continue
		case <-ctx.Done():
			t.Fatal("the subscriber never received a batch")
		}
		break
	}
	// The view starts from a replay up to the first batch received live.
	v := events.NewView()
	order := newOrderCheck()
	fs, err := events.Replay(ctx, replay, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.Seq <= first.Seq {
			if err := v.Apply(f.Seq, f.Payload); err != nil {
				t.Fatal(err)
			}
			if err := order.apply(f.Payload); err != nil {
				t.Fatalf("batch %d: %v", f.Seq, err)
			}
		}
	}
	ws := make([]*worker, goroutines)
	for g := range ws {
		ws[g] = newWorker(m, w, g, tenants, 7)
	}
	// Two phases: the full workload, then one without Delete, whose
	// batches must also move blocks down in order (a Delete racing a write
	// down removes the block above before the write lands below, then
	// removes it below: not a move).
	live := 0
	for phase, deletes := range []bool{true, false} {
		for _, k := range ws {
			k.noDeletes = !deletes
		}
		failOn(t, fmt.Sprintf("events phase %d", phase), runPhase(ctx, ws, ops, func(ctx context.Context, k *worker, n int) error { return k.round(ctx, n) }))
		if err := m.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		last, _, err := m.EventsSeq(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for s, _ := v.Seq(); s < last; s, _ = v.Seq() {
			select {
			case f, ok := <-frames:
				if !ok {
					t.Fatal("the subscription ended")
				}
				if err := v.Apply(f.Seq, f.Payload); err != nil {
					t.Fatalf("batch %d (after %d): %v", f.Seq, s, err) // ErrGap: a batch was lost
				}
				if err := order.apply(f.Payload); err != nil && !deletes {
					t.Fatalf("batch %d: %v", f.Seq, err)
				}
				live++
			case <-ctx.Done():
				t.Fatalf("stuck at batch %d of %d", s, last)
			}
		}
	}
	res, err := m.Residency(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[events.Medium][]uint64{}
	for tier, hs := range res {
		if len(hs) > 0 {
			want[events.MediumOf(tier)] = hs
		}
	}
	if got := v.Residency(); !reflect.DeepEqual(got, want) {
		t.Fatalf("stream residency differs from the tiers: %s vs %s", counts2(got), counts2(want))
	}
	if live < goroutines {
		t.Fatalf("only %d batches live", live)
	}
	if f.d2hFailed.Load()+f.h2dFailed.Load() == 0 {
		t.Fatal("no copy failed: the faults never showed")
	}
	last, _ := v.Seq()
	t.Logf("%d batches live without a gap, last %d; %s; copies failed D2H %d H2D %d", live, last, counts2(want), f.d2hFailed.Load(), f.h2dFailed.Load())
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("hung")
	}
}

func counts2(r map[events.Medium][]uint64) string {
	s := ""
	for _, md := range events.Mediums {
		s += fmt.Sprintf("%s %d ", md, len(r[md]))
	}
	return s
}

// orderCheck follows the stream and checks that blocks move down as
// documented: stored on the lower medium before they are removed from the
// upper one. Below the GPU nothing is computed, so a store on a medium
// while no medium holds the block is only right for a load up into pinned
// memory that raced the eviction of the record it read (verified before):
// a store into CPU of a block the disk or the remote tier held in its last
// life. Any other store from nowhere is a move down reported removal
// first. Its view starts empty: it must see the stream from the start of
// the workload, with a fresh disk.
type orderCheck struct {
	now      map[uint64]uint8 // the mediums holding each block
	life     map[uint64]uint8 // the mediums that held a block since it was last held by none
	lastLife map[uint64]uint8 // the same, for the life before
}

func newOrderCheck() *orderCheck {
	return &orderCheck{now: map[uint64]uint8{}, life: map[uint64]uint8{}, lastLife: map[uint64]uint8{}}
}

func held(m events.Medium) uint8 { return 1 << slices.Index(events.Mediums, m) }

func (c *orderCheck) apply(payload []byte) (err error) {
	b, err := events.DecodeBatch(payload)
	if err != nil {
		return err
	}
	for _, e := range b.Events {
		switch e.Kind {
		case events.AllBlocksCleared:
			c.now = map[uint64]uint8{}
		case events.BlockStored:
			for _, h := range e.Hashes {
				fromBelow := e.Medium == events.MediumCPU && c.lastLife[h]&(held(events.MediumStorage)|held(events.MediumRemote)) != 0
				if _, seen := c.lastLife[h]; seen && c.now[h] == 0 && e.Medium != events.MediumGPU && !fromBelow && err == nil {
					err = fmt.Errorf("%s stored block %x that no medium held, after a life on %08b: a move down reported its removal first", e.Medium, h, c.lastLife[h])
				}
				c.now[h] |= held(e.Medium)
				c.life[h] |= held(e.Medium)
			}
		case events.BlockRemoved:
			for _, h := range e.Hashes {
				if c.now[h] &^= held(e.Medium); c.now[h] == 0 {
					delete(c.now, h)
					c.lastLife[h] = c.life[h]
					delete(c.life, h)
				}
			}
		}
	}
	return err
}
