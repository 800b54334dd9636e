package kvtier

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvtier/kvtier/disk"
	"github.com/kvtier/kvtier/events"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/messages"
)

// The order in which the event stream tells of a block moving down a tier,
// on the success path and on each failure path: a block is stored on the
// lower medium before it is removed from the upper one, and a copy that
// fails, arrives late, or is deleted under way stores nothing. Each test
// names the stream's events for the blocks it moves, in order ("GPU+" a
// store on the GPU, "CPU-" a removal from pinned memory), and checks the
// rule for every block of the run (checkMoves).

// copyFaults fails or holds the host device's copies, by direction.
type copyFaults struct {
	fail [3]atomic.Int32                  // copies left to fail, by gpu.Direction
	hold [3]atomic.Pointer[chan struct{}] // while set, copies wait until it is closed
	// entered hears of each held copy as it starts waiting.
	entered chan gpu.Direction
	// clock, when set, jumps an hour ahead as a held copy up starts (see
	// copyStartClock): a load's deadline passes with its copy under way.
	clock *copyStartClock
}

var errCopyFault = errors.New("test: injected copy fault")

func (f *copyFaults) hook(dir gpu.Direction, _ []gpu.CopyOp) error {
	if h := f.hold[dir].Load(); h != nil {
		if f.clock != nil && dir == gpu.H2D {
			f.clock.started()
		}
		f.entered <- dir
		<-*h
	}
	for {
		n := f.fail[dir].Load()
		if n <= 0 {
			return nil
		}
		if f.fail[dir].CompareAndSwap(n, n-1) {
			return errCopyFault
		}
	}
}

// holdCopies makes copies in dir wait; the func returned lets them go
// (and runs at the test's end, before the Manager closes, should the test
// fail first).
func (f *copyFaults) holdCopies(t *testing.T, dir gpu.Direction) (release func()) {
	ch := make(chan struct{})
	f.hold[dir].Store(&ch)
	var once sync.Once
	release = func() {
		once.Do(func() {
			f.hold[dir].Store(nil)
			close(ch)
		})
	}
	t.Cleanup(release)
	return release
}

// heldCopy waits for a copy to start waiting in holdCopies.
func (f *copyFaults) heldCopy(t *testing.T) {
	t.Helper()
	select {
	case <-f.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no copy started")
	}
}

// orderManager is a Manager publishing events on a host device with f's
// faults: 4 GPU blocks, no offload ahead of need below 85% full.
func orderManager(t *testing.T, f *copyFaults, cfg Config) *Manager {
	t.Helper()
	f.entered = make(chan gpu.Direction, 16)
	dev, err := gpu.NewHost(gpu.HostConfig{Fault: f.hook})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() }) // after the Manager's Close (cleanups run last first)
	cfg.Device = dev
	if cfg.GPUBlocks == 0 {
		cfg.GPUBlocks = 4
	}
	if cfg.PinnedBytes == 0 {
		cfg.PinnedBytes = 1 << 20
	}
	cfg.Events = &EventsConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://127.0.0.1:0"}
	return newManager(t, cfg)
}

// history is each block's events in the stream so far, in order. It takes
// EventsSeq as its barrier (not Flush, which would wait for held copies).
func history(t *testing.T, m *Manager) map[uint64][]string {
	t.Helper()
	ctx := context.Background()
	seq, _, err := m.EventsSeq(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, replay := m.EventEndpoints()
	fs, err := events.Replay(ctx, replay, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64][]string{}
	for _, f := range fs {
		if f.Seq > seq {
			break
		}
		b, err := events.DecodeBatch(f.Payload)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range b.Events {
			sign := "+"
			switch e.Kind {
			case events.BlockRemoved:
				sign = "-"
			case events.AllBlocksCleared:
				continue
			}
			for _, h := range e.Hashes {
				out[h] = append(out[h], string(e.Medium)+sign)
			}
		}
	}
	checkMoves(t, out)
	return out
}

// checkMoves checks that no block is stored below the GPU while no medium
// holds it: a move down that reported its removal first, or a copy stored
// from nowhere. (No test here loads a block whose record the disk evicts
// while it is read, the one way a store into pinned memory may follow
// the disk's removal.)
func checkMoves(t *testing.T, hist map[uint64][]string) {
	t.Helper()
	for h, evs := range hist {
		held := map[string]bool{}
		for i, e := range evs {
			md, stored := e[:len(e)-1], e[len(e)-1] == '+'
			if stored && md != string(events.MediumGPU) && len(held) == 0 && i > 0 {
				t.Errorf("block %x: %s stored while no medium held it (events %v)", h, md, evs)
			}
			if stored {
				held[md] = true
			} else {
				delete(held, md)
			}
		}
	}
}

// blocksOf returns the events of a's blocks, which must all agree.
func blocksOf(t *testing.T, m *Manager, hist map[uint64][]string, a []int64) []string {
	t.Helper()
	k, err := m.chainKeys(context.Background(), a, "", "")
	if err != nil {
		t.Fatal(err)
	}
	hs := hashes(k)
	for _, h := range hs[1:] {
		if !slices.Equal(hist[h], hist[hs[0]]) {
			t.Fatalf("the blocks of one chain tell different stories: %v and %v", hist[hs[0]], hist[h])
		}
	}
	return hist[hs[0]]
}

func wantEvents(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: events %v, want %v", what, got, want)
	}
}

// runTo allocates tokens as seq, waits for its loads, commits and frees.
func runTo(t *testing.T, m *Manager, seq uint64, tokens []int64) OnboardOutcome {
	t.Helper()
	ctx := context.Background()
	r, err := m.Allocate(ctx, AllocRequest{Seq: seq, Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	out := wait(t, r)
	if err := commitFree(ctx, m, seq); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMoveDownHoldsTheRemovalForTheCopy: a GPU block evicted and written
// down stays announced on the GPU while its copy runs, is stored in pinned
// memory once the copy lands, and only then removed from the GPU.
func TestMoveDownHoldsTheRemovalForTheCopy(t *testing.T) {
	f := &copyFaults{}
	m := orderManager(t, f, Config{})
	a := toks(7, 2*bt)
	runTo(t, m, 1, a)
	release := f.holdCopies(t, gpu.D2H)
	done := make(chan OnboardOutcome, 1)
	go func() { done <- runToNoFatal(m, 2, toks(900, 4*bt)) }() // evicts a: written down first
	f.heldCopy(t)
	wantEvents(t, "a's write down under way", blocksOf(t, m, history(t, m), a), "GPU+")
	release()
	waitDone(t, done)
	barrier(t, m)
	wantEvents(t, "a moved down", blocksOf(t, m, history(t, m), a), "GPU+", "CPU+", "GPU-")
}

func waitDone(t *testing.T, done <-chan OnboardOutcome) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the allocation waiting for the copy never ended")
	}
}

// runToNoFatal is runTo for another goroutine, which must not call
// t.Fatal: on an error it returns a zero outcome, and the events the
// caller checks then show what went wrong.
func runToNoFatal(m *Manager, seq uint64, tokens []int64) OnboardOutcome {
	ctx := context.Background()
	r, err := m.Allocate(ctx, AllocRequest{Seq: seq, Tokens: tokens})
	if err != nil {
		return OnboardOutcome{}
	}
	<-r.Ready.Done()
	if commitFree(ctx, m, seq) != nil {
		return OnboardOutcome{}
	}
	return r.Ready.Outcome()
}

// TestFailedMoveDownStoresNothing: a write down whose copy fails leaves the
// block removed from the GPU and stored nowhere.
func TestFailedMoveDownStoresNothing(t *testing.T) {
	f := &copyFaults{}
	m := orderManager(t, f, Config{})
	a := toks(7, 2*bt)
	runTo(t, m, 1, a)
	f.fail[gpu.D2H].Store(1)
	runTo(t, m, 2, toks(900, 4*bt)) // evicts a; its copy down fails
	barrier(t, m)
	wantEvents(t, "a's copy down failed", blocksOf(t, m, history(t, m), a), "GPU+", "GPU-")
	if n := f.fail[gpu.D2H].Load(); n != 0 {
		t.Fatalf("the copy down was never tried (%d faults left)", n)
	}
}

// TestFailedOrLateLoadPublishesNothing: a load up from pinned memory that
// fails, or ends after its deadline, makes no block findable on the GPU:
// the block is announced there only when the engine commits what it
// recomputed, and the late copy's landing changes nothing.
func TestFailedOrLateLoadPublishesNothing(t *testing.T) {
	for _, late := range []bool{false, true} {
		name := map[bool]string{false: "failed", true: "late"}[late]
		t.Run(name, func(t *testing.T) {
			f := &copyFaults{}
			cfg := Config{}
			if late {
				f.clock = &copyStartClock{at: time.Unix(1e9, 0)}
				cfg.Clock, cfg.ReadDeadlineBase = f.clock, time.Second
			}
			m := orderManager(t, f, cfg)
			a := toks(7, 2*bt)
			runTo(t, m, 1, a)
			runTo(t, m, 2, toks(900, 4*bt)) // a moves down
			barrier(t, m)
			moved := []string{"GPU+", "CPU+", "GPU-"}
			wantEvents(t, "a moved down", blocksOf(t, m, history(t, m), a), moved...)
			var release func()
			if late {
				release = f.holdCopies(t, gpu.H2D)
			} else {
				f.fail[gpu.H2D].Store(1)
			}
			ctx := context.Background()
			r, err := m.Allocate(ctx, AllocRequest{Seq: 3, Tokens: a})
			if err != nil {
				t.Fatal(err)
			}
			if r.Tokens.Of(Pinned) != len(a) {
				t.Fatalf("allocation %+v: want a loaded from pinned memory", r.Tokens)
			}
			out := wait(t, r)
			if out.ValidTokens != 0 || (late && out.Late != len(a)/bt) || (!late && out.Failed != len(a)/bt) {
				t.Fatalf("outcome %+v: want the load of a's %d blocks %s", out, len(a)/bt, name)
			}
			wantEvents(t, "after the "+name+" load", blocksOf(t, m, history(t, m), a), moved...)
			if release != nil {
				release() // the late copy lands in the blocks it was swapped out of
				barrier(t, m)
				wantEvents(t, "after the late copy landed", blocksOf(t, m, history(t, m), a), moved...)
			}
			if err := commitFree(ctx, m, 3); err != nil { // the engine recomputed a
				t.Fatal(err)
			}
			barrier(t, m)
			wantEvents(t, "a recomputed", blocksOf(t, m, history(t, m), a), append(moved, "GPU+")...)
		})
	}
}

// TestAbortedSequenceIsNeverAnnounced: blocks freed before their sequence
// committed them are announced nowhere, and never written down.
func TestAbortedSequenceIsNeverAnnounced(t *testing.T) {
	f := &copyFaults{}
	m := orderManager(t, f, Config{Ingestion: IngestAll})
	ctx := context.Background()
	a := toks(7, 4*bt)
	r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r)
	if err := m.Free(ctx, 1); err != nil {
		t.Fatal(err)
	}
	runTo(t, m, 2, toks(900, 4*bt))
	barrier(t, m)
	wantEvents(t, "an aborted sequence's blocks", blocksOf(t, m, history(t, m), a))
}

// TestDeleteDuringMoveDown: a Delete that reaches pinned memory while a
// block's copy down runs drops the copy as it lands: the block is removed
// from the GPU and never stored below.
func TestDeleteDuringMoveDown(t *testing.T) {
	f := &copyFaults{}
	m := orderManager(t, f, Config{})
	a := toks(7, 2*bt)
	runTo(t, m, 1, a)
	release := f.holdCopies(t, gpu.D2H)
	done := make(chan OnboardOutcome, 1)
	go func() { done <- runToNoFatal(m, 2, toks(900, 4*bt)) }()
	f.heldCopy(t)
	if _, err := m.Delete(context.Background(), a, ""); err != nil {
		t.Fatal(err)
	}
	release()
	waitDone(t, done)
	barrier(t, m)
	wantEvents(t, "a deleted while it moved down", blocksOf(t, m, history(t, m), a), "GPU+", "GPU-")
}

// TestPinnedRestartRemovesBelowFirst: the pinned actor failing and
// restarting takes it and the tiers below it out of service: the stream
// removes their blocks at once, and a GPU block evicted afterwards is
// removed from the GPU with no store below.
func TestPinnedRestartRemovesBelowFirst(t *testing.T) {
	f := &copyFaults{}
	m := orderManager(t, f, Config{})
	a, c := toks(7, 2*bt), toks(300, 2*bt)
	runTo(t, m, 1, a)
	runTo(t, m, 2, toks(900, 4*bt)) // a moves down
	barrier(t, m)
	m.system.Root.Send(m.pinPID, (*messages.OffloadDone)(nil)) // panics: the supervisor restarts the actor
	runTo(t, m, 3, c)
	runTo(t, m, 4, toks(1900, 4*bt)) // evicts c: offered, denied
	wantEvents(t, "a, in pinned memory when it restarted", blocksOf(t, m, history(t, m), a), "GPU+", "CPU+", "GPU-", "CPU-")
	wantEvents(t, "c, evicted after the restart", blocksOf(t, m, history(t, m), c), "GPU+", "GPU-")
}

// TestDrainToDiskStoresBelowFirst: a block drained from pinned memory to
// the disk is stored there before it is removed from pinned memory; a
// drain whose disk write fails removes it and stores nothing.
func TestDrainToDiskStoresBelowFirst(t *testing.T) {
	for _, fail := range []bool{false, true} {
		name := map[bool]string{false: "written", true: "write failed"}[fail]
		t.Run(name, func(t *testing.T) {
			fs := &disk.FaultFS{}
			cfg := diskConfig(t, t.TempDir())
			cfg.DiskFS = fs
			f := &copyFaults{}
			m := orderManager(t, f, cfg)
			a := toks(100, 4*bt)
			if fail {
				fs.Inject(disk.Fault{Op: disk.FaultWrite, Err: unix.EIO})
			}
			runTo(t, m, 1, a)
			for i := range 6 { // pushes a out of the GPU, then out of pinned memory
				runTo(t, m, uint64(10+i), toks(10000*(i+2), 8*bt))
				barrier(t, m)
			}
			got := blocksOf(t, m, history(t, m), a)
			want := []string{"GPU+", "CPU+", "GPU-", "STORAGE+", "CPU-"}
			if fail {
				want = []string{"GPU+", "CPU+", "GPU-", "CPU-"}
			}
			wantEvents(t, "a drained to the disk", got, want...)
		})
	}
}

// TestDiskRestartAnnouncesNothingNew: the disk actor failing and
// restarting announces its records again as it starts; the stream already
// holds them on STORAGE and says nothing new, and blocks drained after
// the restart are still stored there before pinned memory lets them go.
func TestDiskRestartAnnouncesNothingNew(t *testing.T) {
	cfg := diskConfig(t, t.TempDir())
	f := &copyFaults{}
	m := orderManager(t, f, cfg)
	a := toks(100, 4*bt)
	push := func(first uint64) {
		for i := range 6 { // pushes what came before out of the GPU, then out of pinned memory
			runTo(t, m, first+uint64(i), toks(int(first)*1000+10000*(i+2), 8*bt))
			barrier(t, m)
		}
	}
	runTo(t, m, 1, a)
	push(10)
	moved := []string{"GPU+", "CPU+", "GPU-", "STORAGE+", "CPU-"}
	wantEvents(t, "a drained to the disk", blocksOf(t, m, history(t, m), a), moved...)
	before := history(t, m)
	m.system.Root.Send(m.diskPID, (*messages.LowerWrite)(nil)) // panics: the supervisor restarts the actor
	b := toks(200, 4*bt)
	runTo(t, m, 2, b)
	push(20)
	after := history(t, m)
	for h, evs := range before {
		onDisk := false
		for _, e := range evs {
			onDisk = e == "STORAGE+" || (onDisk && e != "STORAGE-")
		}
		later := after[h][len(evs):]
		again, gone := slices.Index(later, "STORAGE+"), slices.Index(later, "STORAGE-")
		if onDisk && again >= 0 && (gone < 0 || again < gone) {
			t.Fatalf("block %x, on the disk before the restart: stored there again (events %v, then %v)", h, evs, later)
		}
	}
	wantEvents(t, "b drained to the disk after the restart", blocksOf(t, m, after, b), moved...)
	st, err := m.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// A fresh disk reopens nothing: records counted at a start are the
	// restarted actor's.
	if d := st.Tier(Disk); d.Down || d.Extra["reopen_records"] == 0 {
		t.Fatalf("disk down %v, records announced at its last start %v: want it restarted", d.Down, d.Extra["reopen_records"])
	}
}
