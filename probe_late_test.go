package kvtier

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Probe tests for late loads as the Manager surfaces them: AllocResult's
// Ready and Late, Stats' Timeouts and Overdue, and what is left after.

// pinnedReaders reads the pinned pool's reader references after a barrier
// (Flush and Stats: the pinned actor is idle).
func pinnedReaders(t *testing.T, m *Manager) int {
	t.Helper()
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Stats(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m.pinned.Stats().Readers
}

// TestProbeLateSamePrefixWhileCopyLands: sequence 2's load is late, its old
// copy still blocked on the stream; sequence 3 allocates the same prefix
// meanwhile and is late too (nothing on the GPU may be served for it); once
// 2 commits its recomputed blocks, sequence 4 hits them. Timeouts equal the
// Late blocks the results reported; after everything every GPU block is
// free and no pinned slot keeps a reader.
func TestProbeLateSamePrefixWhileCopyLands(t *testing.T) {
	ctx := context.Background()
	dev, release, clk := slowDevice(t)
	m := newManager(t, deadlineConfig(dev, 12, clk))
	a := toks(3, 3*bt)
	r2 := loadFromPinned(t, m, 12, a)
	late := 0
	o2 := wait(t, r2)
	late += o2.Late
	r3, err := m.Allocate(ctx, AllocRequest{Seq: 3, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	if r3.Tokens.Of(GPU) != 0 {
		t.Fatalf("sequence 3 hit %d tokens on the GPU while 2's late copy lands and 2 committed nothing", r3.Tokens.Of(GPU))
	}
	o3 := wait(t, r3)
	late += o3.Late
	blocks3 := r3.Blocks
	if o3.Blocks != nil {
		blocks3 = o3.Blocks
	}
	for _, b := range blocks3 {
		if slices.Contains(r2.Blocks, b) || slices.Contains(o2.Blocks, b) {
			t.Fatalf("sequence 3's table %v shares block %d with sequence 2 (%v, %v)", blocks3, b, r2.Blocks, o2.Blocks)
		}
	}
	if err := m.Commit(ctx, 2, AllTokens); err != nil {
		t.Fatal(err)
	}
	r4, err := m.Allocate(ctx, AllocRequest{Seq: 4, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r4)
	if r4.Tokens.Of(GPU) != 3*bt || !slices.Equal(r4.Blocks, o2.Blocks) {
		t.Fatalf("sequence 4: %+v, want sequence 2's fresh blocks %v as hits", r4, o2.Blocks)
	}
	close(release)
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	errs, err := m.FreeBatch(ctx, []uint64{2, 3, 4})
	if err != nil || errors.Join(errs...) != nil {
		t.Fatal(err, errs)
	}
	st, _ := m.Stats(ctx)
	g := st.Tier(GPU)
	if int(g.Timeouts) != late || g.Overdue != 0 {
		t.Errorf("timeouts %d overdue %d, results reported %d late", g.Timeouts, g.Overdue, late)
	}
	if int(g.Extra["free"]) != g.Blocks || g.Extra["sequences"] != 0 || g.InFlight != 0 {
		t.Errorf("GPU after everything: %+v %v", g, g.Extra)
	}
	if n := pinnedReaders(t, m); n != 0 {
		t.Errorf("pinned readers %d after everything", n)
	}
}

// TestProbeOverdueManager: with the GPU too full to swap in fresh blocks,
// the late load finishes as hits when its copy does: Late 0, Overdue 3,
// Timeouts 0; the pinned readers go back.
func TestProbeOverdueManager(t *testing.T) {
	ctx := context.Background()
	dev, release, clk := slowDevice(t)
	m := newManager(t, deadlineConfig(dev, 4, clk))
	a := toks(3, 3*bt)
	r := loadFromPinned(t, m, 4, a)
	// Wait until the deadline has passed on the stats: Overdue counts it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, _ := m.Stats(ctx)
		if st.Tier(GPU).Overdue > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-r.Ready.Done():
		t.Fatal("Ready completed while its copy is blocked")
	default:
	}
	close(release)
	out := wait(t, r)
	if out.Late != 0 || out.ValidTokens != 3*bt || out.Blocks != nil {
		t.Fatalf("outcome %+v", out)
	}
	if err := commitFree(ctx, m, 2); err != nil {
		t.Fatal(err)
	}
	st, _ := m.Stats(ctx)
	if g := st.Tier(GPU); g.Overdue != 3 || g.Timeouts != 0 {
		t.Errorf("overdue %d timeouts %d, want 3 and 0", g.Overdue, g.Timeouts)
	}
	if n := pinnedReaders(t, m); n != 0 {
		t.Errorf("pinned readers %d after everything", n)
	}
}

// TestProbeCloseDuringLateCopy: Close while a late copy and an overdue-free
// load's copy are blocked on the stream: Close returns once the stream
// drains, every Ready is closed, and no goroutine is left.
func TestProbeCloseDuringLateCopy(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	dev, release, clk := slowDevice(t)
	m, err := New(deadlineConfig(dev, 12, clk))
	if err != nil {
		t.Fatal(err)
	}
	a := toks(3, 3*bt)
	r := loadFromPinned(t, m, 12, a)
	if out := wait(t, r); out.Late != 3 {
		t.Fatalf("outcome %+v", out)
	}
	closeWhileCopyHeld(t, m, release)
}

// closeWhileCopyHeld calls Close (with 100 ms of context) while release
// still holds the device's copies, releases them after 300 ms, and fails if
// Close has not returned 10 s later.
func closeWhileCopyHeld(t *testing.T, m *Manager, release chan struct{}) {
	t.Helper()
	closed := make(chan error, 1)
	cctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	go func() { closed <- m.Close(cctx) }()
	select {
	case err := <-closed:
		t.Logf("Close returned before the copy was released: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-closed:
		t.Logf("Close: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return after the stream was released")
	}
}

// frozenClock always reads the same instant: a simulator's logical clock
// that has not moved.
type frozenClock struct{ at time.Time }

func (c frozenClock) Now() time.Time { return c.at }

// TestProbeDeadlineJudgedOnConfigClock: Config.Clock says deadlines are
// "set and judged" on it and "follow it". On a logical clock that does not
// move, a load's deadline never passes, so a slow copy is not late: its
// Ready waits for the copy and every loaded token is valid.
func TestProbeDeadlineJudgedOnConfigClock(t *testing.T) {
	dev, release, _ := slowDevice(t)
	m := newManager(t, deadlineConfig(dev, 12, frozenClock{time.Unix(1e9, 0)}))
	a := toks(3, 3*bt)
	r := loadFromPinned(t, m, 12, a)
	select {
	case <-r.Ready.Done():
		t.Errorf("Ready completed (%+v) with the copy blocked and the Manager's clock still short of the deadline", r.Ready.Outcome())
	case <-time.After(200 * time.Millisecond): // 200x the budget in wall time
	}
	close(release)
	if out := wait(t, r); out.Late != 0 || out.ValidTokens != 3*bt {
		t.Errorf("outcome %+v: late on a clock that never reached the deadline", out)
	}
}

// TestProbeLateSwapLosesCachedBlocks: under IngestEvict "a freed cached
// GPU block is written down to pinned memory before it is reused" (README,
// Flows). A late load's fresh blocks evict cached blocks and drop them
// instead (gpu/tier's fetchLate, by design, to keep Ready at the deadline);
// the README's reliability table lists only "the late read or copy" as lost.
// This counts the one-block prompts found in no tier afterwards.
func TestProbeLateSwapLosesCachedBlocks(t *testing.T) {
	ctx := context.Background()
	dev, release, clk := slowDevice(t)
	m := newManager(t, Config{GPUBlocks: 8, PinnedBytes: 1 << 20, Device: dev,
		ReadDeadlineBase: time.Millisecond, ReadDeadlinePerToken: time.Microsecond, Clock: clk})
	a := toks(3, 3*bt)
	if _, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a}); err != nil {
		t.Fatal(err)
	}
	if err := m.Commit(ctx, 1, AllTokens); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Swap(ctx, []uint64{1}); err != nil { // a is below
		t.Fatal(err)
	}
	m.Flush(ctx)
	var small [][]int64
	for i := range 8 { // eight one-block prompts fill the GPU, a leaves it
		p := toks(10000*(i+1), bt)
		small = append(small, p)
		r, err := m.Allocate(ctx, AllocRequest{Seq: uint64(100 + i), Tokens: p})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, r)
		commitFree(ctx, m, uint64(100+i))
	}
	m.Flush(ctx)
	r, err := m.Allocate(ctx, AllocRequest{Seq: 2, Tokens: a})
	if err != nil || r.Tokens.Of(Pinned) != 3*bt {
		t.Fatalf("%+v %v", r, err)
	}
	out := wait(t, r)
	close(release)
	m.Flush(ctx)
	lost := 0
	for _, p := range small {
		pr, err := m.Exists(ctx, p, "")
		if err != nil {
			t.Fatal(err)
		}
		if pr.Tokens.Sum() == 0 {
			lost++
		}
	}
	st, _ := m.Stats(ctx)
	t.Logf("outcome %+v; GPU evictions %d", out, st.Tier(GPU).Evictions)
	if lost > 0 {
		t.Errorf("%d committed one-block prompts are in no tier after a late load's swap (IngestEvict)", lost)
	}
}

// TestProbeDeleteDuringLateCopy: Delete of the chain while sequence 2's
// late copy still reads the pinned slots: the chain is gone from every
// tier, the copy finishes into the old blocks without publishing them, the
// slots' readers go back; sequence 2's recomputed commit may cache it again.
func TestProbeDeleteDuringLateCopyManager(t *testing.T) {
	ctx := context.Background()
	dev, release, clk := slowDevice(t)
	m := newManager(t, deadlineConfig(dev, 12, clk))
	a := toks(3, 3*bt)
	r := loadFromPinned(t, m, 12, a)
	if out := wait(t, r); out.Late != 3 {
		t.Fatalf("outcome %+v", out)
	}
	if _, err := m.Delete(ctx, a, ""); err != nil {
		t.Fatal(err)
	}
	if p, err := m.Exists(ctx, a, ""); err != nil || p.Tokens.Sum() != 0 {
		t.Fatalf("after Delete: %+v %v", p, err)
	}
	close(release)
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if p, err := m.Exists(ctx, a, ""); err != nil || p.Tokens.Sum() != 0 {
		t.Fatalf("after the late copy landed: %+v %v", p, err)
	}
	if err := commitFree(ctx, m, 2); err != nil {
		t.Fatal(err)
	}
	if n := pinnedReaders(t, m); n != 0 {
		t.Errorf("pinned readers %d after everything", n)
	}
	st, _ := m.Stats(ctx)
	if g := st.Tier(GPU); int(g.Extra["free"]) != g.Blocks || g.InFlight != 0 {
		t.Errorf("GPU %+v %v", g, g.Extra)
	}
}

// TestProbeCloseDuringOverdueCopy: Close while an overdue load's copy is
// blocked: its Ready closes once the stream drains (as failed: Close came
// first), Close returns, and no goroutine is left.
func TestProbeCloseDuringOverdueCopy(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	dev, release, clk := slowDevice(t)
	ctx := context.Background()
	m, err := New(deadlineConfig(dev, 4, clk))
	if err != nil {
		t.Fatal(err)
	}
	a := toks(3, 3*bt)
	r := loadFromPinned(t, m, 4, a)
	for {
		st, _ := m.Stats(ctx)
		if st.Tier(GPU).Overdue > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	closeWhileCopyHeld(t, m, release)
	out := wait(t, r)
	t.Logf("overdue load's outcome after Close: %+v", out)
	if out.Blocks != nil {
		t.Errorf("outcome Blocks %v not nil: the caller would replace its table", out.Blocks)
	}
	if out.ValidTokens+out.Failed*bt != 3*bt {
		t.Errorf("outcome %+v does not cover the loading tokens", out)
	}
}
