package kvtier

import (
	"context"
	"errors"
	"testing"
)

// TestActorlessCallsCheckLikeOthers: Swap without a pinned tier and
// EventsSeq without Config.Events answer without asking an actor, but as
// every other call does for a nil context and after Close (ErrNilContext,
// ErrClosed). EventsSeq returned nil for both, and Swap ErrNoLowerTier.
func TestActorlessCallsCheckLikeOthers(t *testing.T) {
	m, err := New(Config{GPUBlocks: 4})
	if err != nil {
		t.Fatal(err)
	}
	var nilCtx context.Context
	if _, err := m.Swap(nilCtx, []uint64{1}); !errors.Is(err, ErrNilContext) {
		t.Errorf("Swap(nil ctx): %v, want ErrNilContext", err)
	}
	if _, _, err := m.EventsSeq(nilCtx); !errors.Is(err, ErrNilContext) {
		t.Errorf("EventsSeq(nil ctx): %v, want ErrNilContext", err)
	}
	ctx := context.Background()
	if _, err := m.Swap(ctx, []uint64{1}); !errors.Is(err, ErrNoLowerTier) {
		t.Errorf("Swap without a pinned tier: %v, want ErrNoLowerTier", err)
	}
	if _, ok, err := m.EventsSeq(ctx); ok || err != nil {
		t.Errorf("EventsSeq without Events: ok %v, %v; want false, nil", ok, err)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Swap(ctx, []uint64{1}); !errors.Is(err, ErrClosed) {
		t.Errorf("Swap after Close: %v, want ErrClosed", err)
	}
	if _, _, err := m.EventsSeq(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("EventsSeq after Close: %v, want ErrClosed", err)
	}
}
