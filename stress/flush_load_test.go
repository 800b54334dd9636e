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
)

// TestFlushUnderLoad: Flush is documented to wait for the writes in flight when
// it was called, so it must return while other goroutines keep the Manager busy.
func TestFlushUnderLoad(t *testing.T) {
	deadline(t)
	goroutines := envInt(t, "KVTIER_STRESS_GOROUTINES", 64)
	ctx, cancel := context.WithTimeout(context.Background(), hangAfter)
	defer cancel()
	f := &faults{rng: rand.New(rand.NewPCG(3, 3)), slowH2D: 30, slowD2H: 30, slow: 2 * time.Millisecond}
	dev := newFaultyDevice(t, f)
	defer dev.Close()
	m := newManager(t, kvtier.Config{Device: dev, ReadDeadlineBase: 50 * time.Millisecond})
	defer m.Close(context.Background())
	w := &writers{}
	stop := make(chan struct{})
	var ops atomic.Int64
	started := make(chan struct{})
	var once sync.Once
	errs := make([]error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		k := newWorker(m, w, g, tenants, 5)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					errs[g] = k.round(ctx, 0)
					return
				default:
				}
				if ops.Add(1) == int64(goroutines)*20 {
					once.Do(func() { close(started) })
				}
				if err := k.step(ctx); err != nil {
					errs[g] = err
					return
				}
			}
		}()
	}
	<-started
	fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
	t0 := time.Now()
	loadErr := m.Flush(fctx)
	took := time.Since(t0)
	fcancel()
	close(stop)
	wg.Wait()
	failOn(t, "load", errs)
	qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
	defer qcancel()
	idleErr := m.Flush(qctx)
	if loadErr != nil {
		t.Errorf("Flush under load: %v after %v (ops so far %d); Flush once the load stopped: %v", loadErr, took.Round(time.Millisecond), ops.Load(), idleErr)
	}
	if idleErr != nil && !errors.Is(loadErr, context.DeadlineExceeded) {
		t.Errorf("Flush with no load: %v", idleErr)
	}
}
