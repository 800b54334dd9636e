package stress

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/gpu"
)

// TestCloseInFlight closes the Manager while every goroutine has calls and
// slow copies in flight: each call ends with ErrClosed or its result, none
// hangs (the context is the hang detector), and later calls get ErrClosed.
func TestCloseInFlight(t *testing.T) {
	deadline(t)
	if abandoned := closeInFlight(t); abandoned > 0 {
		t.Logf("%d Ready completions never completed after Close (see TestReadyCompletesAfterClose)", abandoned)
	}
}

// TestReadyCompletesAfterClose: a Ready handed out before Close must complete.
func TestReadyCompletesAfterClose(t *testing.T) {
	deadline(t)
	if abandoned := closeInFlight(t); abandoned > 0 {
		t.Fatalf("%d Ready completions never completed after Close", abandoned)
	}
}

func closeInFlight(t *testing.T) (abandoned int) {
	goroutines := envInt(t, "KVTIER_STRESS_GOROUTINES", 64)
	for round := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), hangAfter)
		f := &faults{rng: rand.New(rand.NewPCG(11, uint64(round))), failH2D: 5, slowH2D: 30, failD2H: 5, slowD2H: 30, slow: 2 * time.Millisecond}
		dev := newFaultyDevice(t, f)
		m := newManager(t, kvtier.Config{Device: dev, ReadDeadlineBase: 50 * time.Millisecond})
		w := &writers{}
		var ops atomic.Int64
		started := make(chan struct{})
		var once sync.Once
		errs := make([]error, goroutines)
		ws := make([]*worker, goroutines)
		closed := make(chan struct{})
		var wg sync.WaitGroup
		for g := range goroutines {
			k := newWorker(m, w, g, tenants, uint64(round))
			k.closing, k.closed, ws[g] = true, closed, k
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					if ops.Add(1) == int64(goroutines)*20 {
						once.Do(func() { close(started) })
					}
					err := k.step(ctx)
					if errors.Is(err, errStop) {
						return
					}
					if err != nil {
						errs[g] = err
						return
					}
				}
			}()
		}
		<-started
		// Close's flush is bounded by its context; under this load it does not
		// finish (see TestFlushUnderLoad), so Close may report the deadline.
		cctx, ccancel := context.WithTimeout(ctx, 500*time.Millisecond)
		if err := m.Close(cctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("round %d: close: %v", round, err)
		} else if err != nil {
			t.Logf("round %d: close: %v", round, err)
		}
		ccancel()
		close(closed)
		wg.Wait()
		for _, k := range ws {
			abandoned += k.abandoned
		}
		failOn(t, "close in flight", errs)
		if _, err := m.Allocate(context.Background(), kvtier.AllocRequest{Seq: 1, Tokens: stem(0)}); !errors.Is(err, kvtier.ErrClosed) {
			t.Errorf("allocate after close: %v, want ErrClosed", err)
		}
		if err := m.Flush(context.Background()); !errors.Is(err, kvtier.ErrClosed) {
			t.Errorf("flush after close: %v, want ErrClosed", err)
		}
		if err := m.Close(context.Background()); !errors.Is(err, kvtier.ErrClosed) {
			t.Errorf("second close: %v, want ErrClosed", err)
		}
		if err := dev.Close(); err != nil {
			t.Errorf("device close: %v", err)
		}
		cancel()
		t.Logf("round %d: %d ops before every goroutine saw the close; faults: %v", round, ops.Load(), f)
	}
	return abandoned
}

// TestCancelledContexts: a cancelled context ends every call with its error,
// and a deadline ends a call that is waiting (a Flush behind a held copy).
func TestCancelledContexts(t *testing.T) {
	deadline(t)
	gate := make(chan struct{})
	var gateOnce sync.Once
	open := func() { gateOnce.Do(func() { close(gate) }) }
	dev, err := gpu.NewHost(gpu.HostConfig{Fault: func(dir gpu.Direction, _ []gpu.CopyOp) error {
		if dir == gpu.D2H {
			<-gate
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	m := newManager(t, kvtier.Config{Device: dev, Ingestion: kvtier.IngestAll})
	defer m.Close(context.Background())
	defer open()
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := map[string]func(context.Context) error{
		"allocate": func(ctx context.Context) error {
			_, err := m.Allocate(ctx, kvtier.AllocRequest{Seq: 1, Tokens: stem(0)})
			return err
		},
		"append": func(ctx context.Context) error { _, err := m.Append(ctx, 1, []int64{1}); return err },
		"free":   func(ctx context.Context) error { return m.Free(ctx, 1) },
		"exists": func(ctx context.Context) error { _, err := m.Exists(ctx, stem(0), ""); return err },
		"delete": func(ctx context.Context) error { _, err := m.Delete(ctx, stem(0), ""); return err },
		"prefetch": func(ctx context.Context) error {
			_, err := m.Prefetch(ctx, stem(0), "")
			return err
		},
		"flush": m.Flush,
		"stats": func(ctx context.Context) error { _, err := m.Stats(ctx); return err },
	}
	for name, call := range calls {
		if err := call(cctx); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v, want context.Canceled", name, err)
		}
	}
	// IngestAll writes the sequence's blocks down at commit; the copy is held.
	ctx := context.Background()
	r, err := m.Allocate(ctx, kvtier.AllocRequest{Seq: 2, Tokens: stem(1)})
	if err != nil {
		t.Fatal(err)
	}
	<-r.Ready.Done()
	if err := m.Commit(ctx, 2, len(stem(1))); err != nil {
		t.Fatal(err)
	}
	if err := m.Free(ctx, 2); err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer dcancel()
	if err := m.Flush(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("flush behind a held copy: %v, want context.DeadlineExceeded", err)
	}
	open()
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	checkQuiescent(t, ctx, m, "after the held copy", nil)
}
