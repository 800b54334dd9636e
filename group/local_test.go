package group_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/kvtier/kvtier/group"
)

// TestLocalReducesMin checks Local against a trivial model: for random
// values on 4 ranks over many reductions, every rank gets the minimum.
func TestLocalReducesMin(t *testing.T) {
	const ranks, ops = 4, 300
	l, err := group.NewLocal(ranks)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	vals := make([][]int64, ops)
	for i := range vals {
		vals[i] = make([]int64, ranks)
		for r := range vals[i] {
			vals[i][r] = rng.Int64N(100) - 2
		}
	}
	got := make([][]int64, ranks)
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Go(func() {
			c := l.Rank(r)
			for i := range ops {
				v, err := c.AllReduceMin(context.Background(), uint64(i), vals[i][r])
				if err != nil {
					errs[r] = err
					return
				}
				got[r] = append(got[r], v)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i := range ops {
		want := vals[i][0]
		for _, v := range vals[i] {
			want = min(want, v)
		}
		for r := range ranks {
			if got[r][i] != want {
				t.Fatalf("reduction %d rank %d: %d, want %d", i, r, got[r][i], want)
			}
		}
	}
}

// TestLocalCanceledRankFailsEveryRank: a rank whose context ends leaves
// the reduction; the ranks waiting and the rank arriving later all get an
// error naming it, and nobody waits forever. The next reduction works.
func TestLocalCanceledRankFailsEveryRank(t *testing.T) {
	l, err := group.NewLocal(4)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for r := range 2 { // ranks 0 and 1 wait; rank 2 has not arrived yet
		wg.Go(func() { _, errs[r] = l.Rank(r).AllReduceMin(ctx, 0, 5) })
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, errs[3] = l.Rank(3).AllReduceMin(canceled, 0, 5)
	wg.Wait()
	_, errs[2] = l.Rank(2).AllReduceMin(ctx, 0, 5)
	for r, err := range errs {
		var re *group.RankError
		if !errors.Is(err, group.ErrAborted) || !errors.As(err, &re) || re.Rank != 3 || !errors.Is(err, context.Canceled) {
			t.Fatalf("rank %d: %v, want a *RankError of rank 3 matching ErrAborted and context.Canceled", r, err)
		}
	}
	// Reduction 1 is unaffected.
	got := make([]int64, 4)
	for r := range 4 {
		wg.Go(func() { got[r], errs[r] = l.Rank(r).AllReduceMin(ctx, 1, int64(10+r)) })
	}
	wg.Wait()
	for r := range 4 {
		if errs[r] != nil || got[r] != 10 {
			t.Fatalf("rank %d after the failed reduction: %d, %v", r, got[r], errs[r])
		}
	}
}

// TestLocalFailAndClose: a failed rank fails the reductions waiting and
// every later one; Close answers what still waits with ErrClosed.
func TestLocalFailAndClose(t *testing.T) {
	ctx := context.Background()
	l, err := group.NewLocal(3)
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() { _, errs[r] = l.Rank(r).AllReduceMin(ctx, 0, 1) })
	}
	boom := errors.New("rank 2 died")
	l.Fail(2, boom)
	wg.Wait()
	_, errs[2] = l.Rank(0).AllReduceMin(ctx, 1, 1)
	for r, err := range errs {
		if !errors.Is(err, group.ErrAborted) || !errors.Is(err, boom) {
			t.Fatalf("call %d: %v, want ErrAborted wrapping the failure", r, err)
		}
	}
	l.Close()

	l, err = group.NewLocal(2)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := l.Rank(0).AllReduceMin(ctx, 0, 1); done <- err }()
	l.Close()
	if err := <-done; !errors.Is(err, group.ErrClosed) {
		t.Fatalf("waiting at Close: %v, want ErrClosed", err)
	}
	if _, err := l.Rank(1).AllReduceMin(ctx, 0, 1); !errors.Is(err, group.ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
	l.Close() // twice is fine
}
