package kvtier

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/gpu"
)

// TestNilContext: every call that takes a context refuses a nil one with
// ErrNilContext, changes nothing, and panics nowhere.
func TestNilContext(t *testing.T) {
	m := newManager(t, Config{GPUBlocks: 8, PinnedBytes: 1 << 20})
	var nilCtx context.Context // a caller's bug, not a panic
	a := toks(1, 2*bt)
	calls := map[string]func() error{
		"Allocate": func() error { _, err := m.Allocate(nilCtx, AllocRequest{Seq: 1, Tokens: a}); return err },
		"AllocateBatch": func() error {
			_, err := m.AllocateBatch(nilCtx, []AllocRequest{{Seq: 1, Tokens: a}})
			return err
		},
		"Step": func() error {
			_, err := m.Step(nilCtx, StepRequest{Allocate: []AllocRequest{{Seq: 1, Tokens: a}}})
			return err
		},
		"Commit":      func() error { return m.Commit(nilCtx, 1, AllTokens) },
		"CommitBatch": func() error { _, err := m.CommitBatch(nilCtx, []CommitItem{{Seq: 1}}); return err },
		"Append":      func() error { _, err := m.Append(nilCtx, 1, []int64{1}); return err },
		"AppendBatch": func() error { _, err := m.AppendBatch(nilCtx, []AppendItem{{Seq: 1, Tokens: []int64{1}}}); return err },
		"Free":        func() error { return m.Free(nilCtx, 1) },
		"FreeBatch":   func() error { _, err := m.FreeBatch(nilCtx, []uint64{1}); return err },
		"Swap":        func() error { _, err := m.Swap(nilCtx, []uint64{1}); return err },
		"Exists":      func() error { _, err := m.Exists(nilCtx, a, ""); return err },
		"Lookup":      func() error { _, err := m.Lookup(nilCtx, LookupRequest{Tokens: a}); return err },
		"Delete":      func() error { _, err := m.Delete(nilCtx, a, ""); return err },
		"Prefetch":    func() error { _, err := m.Prefetch(nilCtx, a, ""); return err },
		"Flush":       func() error { return m.Flush(nilCtx) },
		"Stats":       func() error { _, err := m.Stats(nilCtx); return err },
		"Close":       func() error { return m.Close(nilCtx) },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ErrNilContext) {
			t.Errorf("%s(nil ctx) = %v, want ErrNilContext", name, err)
		}
	}
	// A Manager with the GPU tier alone refuses them as well (Prefetch,
	// which has nothing to ask there, answered 0, nil).
	g := newManager(t, Config{GPUBlocks: 8})
	for name, call := range map[string]func() error{
		"Prefetch": func() error { _, err := g.Prefetch(nilCtx, a, ""); return err },
		"Lookup":   func() error { _, err := g.Lookup(nilCtx, LookupRequest{Tokens: a}); return err },
		"Exists":   func() error { _, err := g.Exists(nilCtx, a, ""); return err },
		"Delete":   func() error { _, err := g.Delete(nilCtx, a, ""); return err },
		"Flush":    func() error { return g.Flush(nilCtx) },
	} {
		if err := call(); !errors.Is(err, ErrNilContext) {
			t.Errorf("GPU alone: %s(nil ctx) = %v, want ErrNilContext", name, err)
		}
	}
	// Nothing took effect: the sequence id is free and the Manager open.
	ctx := context.Background()
	r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
	if err != nil {
		t.Fatalf("Allocate after the refused calls: %v", err)
	}
	if r.Tokens.Of(GPU) != 0 {
		t.Fatalf("a refused call cached blocks: %+v", r)
	}
}

// TestDiskSettingsValidatedWithoutDiskDir: every disk field is checked even
// when no disk directory enables the tier.
func TestDiskSettingsValidatedWithoutDiskDir(t *testing.T) {
	for field, c := range map[string]Config{
		"DiskWriteQuota": {GPUBlocks: 4, DiskWriteQuota: -1},
		"DiskPolicy":     {GPUBlocks: 4, DiskPolicy: 99},
		"DiskIngestion":  {GPUBlocks: 4, DiskIngestion: 99},
		"Layout":         {GPUBlocks: 4, Layout: 99},
	} {
		var ce *ConfigError
		if _, err := New(c); !errors.As(err, &ce) || ce.Field != field || !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: %v, want a ConfigError naming %s", c, err, field)
		}
	}
}

// TestBackPressure: with MaxPendingCalls slots taken, a further call waits
// for one under its context; when the context ends first it has no effect
// and says so (ErrCanceled), and it goes through once a slot frees.
func TestBackPressure(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Config{GPUBlocks: 8, PinnedBytes: 1 << 20, Ingestion: IngestAll, MaxPendingCalls: 1})
	a := toks(7, 2*bt)
	r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r)
	f := signalFence(t, m) // holds the write-through, so a Flush holds the only slot
	if errs, err := m.CommitBatch(ctx, []CommitItem{{Seq: 1, Tokens: AllTokens, After: f}}); err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- m.Flush(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); len(m.calls) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the Flush never took the slot")
		}
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = m.Allocate(short, AllocRequest{Seq: 2, Tokens: toks(100, bt)})
	select {
	case err := <-flushed:
		t.Fatalf("Flush returned (%v) before its fence was signalled", err)
	default:
	}
	if !errors.Is(err, ErrCanceled) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call past MaxPendingCalls = %v, want ErrCanceled wrapping the deadline", err)
	}
	f.Signal()
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if _, err := m.Allocate(ctx, AllocRequest{Seq: 2, Tokens: toks(100, bt)}); err != nil {
		t.Fatalf("sequence 2 after its cancelled call: %v (the cancelled call took effect?)", err)
	}
}

// TestUnallocatableSizesAreErrors: sizes the machine cannot back fail New
// with an error wrapping gpu.ErrOutOfMemory, never a fatal "out of memory"
// from make: GPU blocks, tokens per block, pinned bytes.
func TestUnallocatableSizesAreErrors(t *testing.T) {
	mem, ok := gpu.SystemMemory()
	if !ok {
		t.Skip("the machine's memory is unknown on this platform")
	}
	huge := int(min(mem/64, 1<<31-1)) // blocks: metadata and arena beyond RAM + swap
	for name, c := range map[string]Config{
		"GPUBlocks":   {GPUBlocks: huge},
		"BlockTokens": {GPUBlocks: 1 << 16, BlockTokens: int(min(mem/(1<<16)/8+1, 1<<40))},
	} {
		if _, err := New(c); !errors.Is(err, gpu.ErrOutOfMemory) {
			t.Errorf("%s: New = %v, want an error wrapping gpu.ErrOutOfMemory", name, err)
		}
	}
	if _, err := New(Config{GPUBlocks: 4, PinnedBytes: int64(mem) * 2}); err == nil || !errors.Is(err, ErrBadConfig) {
		t.Errorf("PinnedBytes beyond the machine: %v, want ErrBadConfig saying what failed", err)
	}
}

// TestLoadOutcomeAccountsForEveryBlock: with a 16-slot pinned tier and
// write-through to disk (where loads race evictions), every load that
// yields fewer valid tokens than were loading says why: ValidTokens plus
// the Late, Failed, Evicted and Mismatch blocks cover what was loading.
func TestLoadOutcomeAccountsForEveryBlock(t *testing.T) {
	ctx := context.Background()
	cfg := diskConfig(t, t.TempDir())
	cfg.GPUBlocks, cfg.PinnedBytes = 16, 16*4096
	cfg.Ingestion, cfg.DiskIngestion = IngestAll, IngestAll
	m := newManager(t, cfg)
	loads, short := 0, 0
	for i := range 120 {
		a := toks(1000*(i%10), 6*bt)
		r, err := m.Allocate(ctx, AllocRequest{Seq: uint64(i + 1), Tokens: a})
		if err != nil {
			t.Fatal(err)
		}
		out := wait(t, r)
		loading := r.Tokens.Below()
		if loading > 0 {
			loads++
		}
		if out.ValidTokens < r.Tokens.Of(GPU)+loading {
			short++
		}
		if got := out.ValidTokens + (out.Late+out.Failed+out.Evicted+out.Mismatch)*bt; got < r.Tokens.Of(GPU)+loading {
			t.Fatalf("request %d: %d GPU + %d loading tokens, outcome %+v accounts for %d", i, r.Tokens.Of(GPU), loading, out, got)
		}
		writeBlocks(t, m, r.Blocks[out.ValidTokens/bt:], a[out.ValidTokens/bt*bt:], "")
		if err := commitFree(ctx, m, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if loads == 0 {
		t.Fatal("no request loaded from a lower tier: the test proves nothing")
	}
	t.Logf("%d loads, %d short", loads, short)
}

// TestTokenSlicesAreReadOnlyDuringTheCall: the Manager does not copy request
// tokens (see "Ownership" in the package doc), so it must not read them after
// a call returns, however it returns: answered, cancelled, or cut by Close.
// Callers here overwrite their one buffer right after each call; the race
// detector reports any read by an actor after that.
func TestTokenSlicesAreReadOnlyDuringTheCall(t *testing.T) {
	m, err := New(Config{GPUBlocks: 32, BlockTokens: bt, PinnedBytes: 64 << 10, Ingestion: IngestAll})
	if err != nil {
		t.Fatal(err)
	}
	const callers = 4
	errs := make([]error, callers)
	done := make(chan struct{})
	var wg, warm sync.WaitGroup
	warm.Add(callers)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			warmed := false
			defer func() {
				if !warmed {
					warm.Done()
				}
			}()
			buf := make([]int64, 3*bt)
			dec := make([]int64, 1)
			for i := 0; ; i++ {
				if i == 20 {
					warmed = true
					warm.Done() // Close comes once every caller ran a while
				}
				select {
				case <-done:
					return
				default:
				}
				for j := range buf {
					buf[j] = int64((i%5)*1000 + j) // shared prefixes across calls
				}
				seq := uint64(g)<<32 | uint64(i)
				ctx, cancel := context.WithCancel(context.Background())
				if i%3 == 0 {
					cancel() // some calls are withdrawn before or while they run
				}
				_, err := m.Step(ctx, StepRequest{Allocate: []AllocRequest{{Seq: seq, Tokens: buf}}})
				clear(buf) // the caller's buffer is its own again
				if err == nil {
					_, err = m.AppendBatch(ctx, []AppendItem{{Seq: seq, Tokens: dec}})
					dec[0]++
				}
				if err == nil {
					_, err = m.Step(ctx, StepRequest{Commit: []CommitItem{{Seq: seq, Tokens: AllTokens}}, Free: []uint64{seq}})
				}
				cancel()
				switch {
				case err == nil, errors.Is(err, ErrCanceled), errors.Is(err, context.Canceled), errors.Is(err, ErrNotReady):
				case errors.Is(err, ErrClosed):
					return
				default:
					errs[g] = err
					return
				}
			}
		}()
	}
	warm.Wait()
	if err := m.Close(context.Background()); err != nil {
		t.Error(err)
	}
	close(done)
	wg.Wait()
	for g, err := range errs {
		if err != nil {
			t.Errorf("caller %d: %v", g, err)
		}
	}
}
