package kvtier

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/disk"
)

// holdReads is the OS file system with disk reads held, once on, until
// release is closed.
type holdReads struct {
	disk.OSFS
	on      atomic.Bool
	release chan struct{}
	once    sync.Once
}

// free lets held reads go on (and any later ones).
func (h *holdReads) free() { h.once.Do(func() { close(h.release) }) }

func (h *holdReads) OpenFile(name string, direct bool) (disk.File, error) {
	f, err := h.OSFS.OpenFile(name, direct)
	if err != nil {
		return nil, err
	}
	return &heldFile{File: f, h: h}, nil
}

type heldFile struct {
	disk.File
	h *holdReads
}

func (f *heldFile) wait() {
	if f.h.on.Load() {
		<-f.h.release
	}
}

func (f *heldFile) ReadAt(p []byte, off int64) (int, error) {
	f.wait()
	return f.File.ReadAt(p, off)
}

// ReadvAt keeps the store's one-preadv read path.
func (f *heldFile) ReadvAt(bufs [][]byte, off int64) (int, error) {
	f.wait()
	return f.File.(disk.VectoredReader).ReadvAt(bufs, off)
}

// manualClock reads what the test sets.
type manualClock struct{ at atomic.Pointer[time.Time] }

func (c *manualClock) Now() time.Time  { return *c.at.Load() }
func (c *manualClock) set(t time.Time) { c.at.Store(&t) }

// TestLateDiskKeepsPinnedRun: a prompt whose first two blocks pinned memory
// holds and whose last two only the disk holds, reloaded under a deadline
// that the disk read misses (it is held until after the deadline): the two
// pinned blocks land and stay valid, the disk's two are late. Before, the
// late disk read made the whole load a miss.
func TestLateDiskKeepsPinnedRun(t *testing.T) {
	ctx := context.Background()
	clk := &manualClock{}
	t0 := time.Unix(1e9, 0)
	clk.set(t0)
	hold := &holdReads{release: make(chan struct{})}
	m := newManager(t, Config{GPUBlocks: 4, PinnedBytes: 8 * 4096, DiskDir: t.TempDir(), DiskBytes: 1 << 20, DiskFS: hold, Clock: clk})
	t.Cleanup(hold.free) // before the Manager's Close, which waits for held reads
	seq := uint64(0)
	run := func(tokens []int64) {
		t.Helper()
		seq++
		cycle(t, m, AllocRequest{Seq: seq, Tokens: tokens})
	}
	where := func(tokens []int64) TierTokens {
		t.Helper()
		pr, err := m.Exists(ctx, tokens, "")
		if err != nil {
			t.Fatal(err)
		}
		return pr.Tokens
	}
	p := toks(0, 4*bt)
	run(p)
	for i := range 4 { // push p below the GPU and the pinned tier's 8 slots
		run(toks(1000*(i+1), 4*bt))
	}
	if w := where(p); w.Of(Pinned) != 0 || w.Of(Disk) != 4*bt {
		t.Fatalf("p is at %v, want the disk only", w)
	}
	run(p[:2*bt])         // its first two blocks back up through pinned memory
	run(toks(9000, 4*bt)) // and off the GPU again
	if w := where(p); w.Of(GPU) != 0 || w.Of(Pinned) != 2*bt || w.Of(Disk) != 4*bt {
		t.Fatalf("p is at %v, want its first two blocks in pinned memory, all four on disk", w)
	}

	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := st.Tier(GPU).Onboarded
	hold.on.Store(true)
	r, err := m.Allocate(ctx, AllocRequest{Seq: 100, Tokens: p, LoadDeadline: t0.Add(10 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Tokens.Of(Pinned); got != 2*bt {
		t.Fatalf("allocation %+v, want 2 blocks from pinned memory", r.Tokens)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		st, err := m.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Tier(GPU).Onboarded >= before+2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pinned run never landed")
		}
		time.Sleep(time.Millisecond)
	}
	clk.set(t0.Add(time.Hour)) // past the deadline, the disk read still held
	select {
	case <-r.Ready.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Ready not completed after the deadline")
	}
	hold.free()
	if out := r.Ready.Outcome(); out.ValidTokens != 2*bt || out.Late != 2 {
		t.Fatalf("outcome %+v, want the pinned run valid and the disk's two blocks late", out)
	}
}
