package group_test

import (
	"context"
	"errors"
	"fmt"
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
	// A reduction begun after the Fail names itself and the failed rank.
	var re *group.RankError
	if !errors.As(errs[2], &re) || re.Op != 1 || re.Rank != 2 {
		t.Fatalf("reduction 1 after the Fail: %+v, want a RankError for op 1 naming rank 2", re)
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

// TestLocalForgetsFailedReductions: after Fail, no reduction can complete
// (the failed rank never arrives), so the owner forgets each one as soon
// as every other rank has had its answer — those failed before the Fail,
// those waiting at it and those begun after it — and a late arrival of the
// failed rank leaves nothing behind. Every arrival still gets an error.
func TestLocalForgetsFailedReductions(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("rank 2 died")
	checkFailed := func(what string, err error, cause error) {
		t.Helper()
		if !errors.Is(err, group.ErrAborted) || !errors.Is(err, cause) {
			t.Fatalf("%s: %v, want ErrAborted wrapping %v", what, err, cause)
		}
	}
	checkPending := func(l *group.Local, what string, want int) {
		t.Helper()
		if n := l.Pending(); n != want {
			t.Fatalf("%s: the owner keeps %d reductions, want %d", what, n, want)
		}
	}
	l, err := group.NewLocal(3)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	// Reduction 0 fails before the Fail: rank 0 leaves it, rank 1 arrives
	// after; it is kept for rank 2, which might still come.
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = l.Rank(0).AllReduceMin(canceled, 0, 1)
	checkFailed("rank 0 leaving reduction 0", err, context.Canceled)
	_, err = l.Rank(1).AllReduceMin(ctx, 0, 1)
	checkFailed("rank 1 at reduction 0", err, context.Canceled)
	checkPending(l, "before the Fail", 1)

	// Rank 2 dies: it will never arrive at reduction 0.
	l.Fail(2, boom)
	checkPending(l, "after the Fail", 0)

	// Later reductions fail on ranks 0 and 1 and are forgotten once both
	// have had their answer; the one rank 0 alone reached is kept for rank 1.
	for op := uint64(1); op <= 3; op++ {
		_, err := l.Rank(0).AllReduceMin(ctx, op, 1)
		checkFailed(fmt.Sprintf("rank 0 at reduction %d", op), err, boom)
		checkPending(l, fmt.Sprintf("rank 0 at reduction %d", op), 1)
		_, err = l.Rank(1).AllReduceMin(ctx, op, 1)
		checkFailed(fmt.Sprintf("rank 1 at reduction %d", op), err, boom)
		checkPending(l, fmt.Sprintf("rank 1 at reduction %d", op), 0)
	}

	// The failed rank arriving anyway — late, or ahead of the others —
	// gets an error and is kept for no one.
	for _, op := range []uint64{0, 3, 4} {
		_, err = l.Rank(2).AllReduceMin(ctx, op, 1)
		if !errors.Is(err, group.ErrAborted) {
			t.Fatalf("the failed rank at reduction %d: %v, want ErrAborted", op, err)
		}
		checkPending(l, fmt.Sprintf("the failed rank at reduction %d", op), 0)
	}
	for r := range 2 {
		_, err = l.Rank(r).AllReduceMin(ctx, 4, 1)
		checkFailed(fmt.Sprintf("rank %d at reduction 4", r), err, boom)
	}
	checkPending(l, "reduction 4", 0)

	// Ranks waiting at the Fail get their error; the reduction is forgotten.
	l2, err := group.NewLocal(3)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() { _, errs[r] = l2.Rank(r).AllReduceMin(ctx, 0, 1) })
	}
	l2.Fail(2, boom)
	wg.Wait()
	for r, err := range errs {
		checkFailed(fmt.Sprintf("rank %d waiting at the Fail", r), err, boom)
	}
	checkPending(l2, "waiting at the Fail", 0)

	defer func() {
		if recover() == nil {
			t.Fatal("Fail of a rank outside the group did not panic")
		}
	}()
	l2.Fail(3, boom)
}

// TestLocalNilContext: a reduction called with a nil context is refused
// (ErrNilContext) and arrives nowhere: the group's next reduction, with
// every rank, completes. (It panicked.)
func TestLocalNilContext(t *testing.T) {
	l, err := group.NewLocal(2)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var nilCtx context.Context
	if _, err := l.Rank(0).AllReduceMin(nilCtx, 1, 5); !errors.Is(err, group.ErrNilContext) {
		t.Fatalf("AllReduceMin(nil ctx) = %v, want ErrNilContext", err)
	}
	got := make(chan int64, 2)
	for r := range 2 {
		go func() {
			v, err := l.Rank(r).AllReduceMin(context.Background(), 1, int64(7+r))
			if err != nil {
				t.Error(err)
			}
			got <- v
		}()
	}
	if a, b := <-got, <-got; a != 7 || b != 7 {
		t.Fatalf("reduction after the refused one: %d, %d; want 7 on both", a, b)
	}
}
