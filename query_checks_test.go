package kvtier

import (
	"context"
	"errors"
	"testing"
)

// TestQueriesCheckTheCallFirst: a query with a token outside the
// vocabulary answers a nil context with ErrNilContext and a closed Manager
// with ErrClosed, as every call does (an Allocate of the same tokens
// included): the vocabulary check came first and answered
// ErrTokenOutOfRange, and PrefetchChain without a pinned tier answered a
// closed Manager (0, nil).
func TestQueriesCheckTheCallFirst(t *testing.T) {
	const vocab = 1000
	bad := []int64{1, vocab}
	var nilCtx context.Context
	for _, pinned := range []int64{0, 1 << 20} {
		m := newManager(t, Config{GPUBlocks: 8, PinnedBytes: pinned, VocabSize: vocab})
		queries := []struct {
			name string
			call func(ctx context.Context, toks []int64) error
		}{
			{"Exists", func(ctx context.Context, toks []int64) error { _, err := m.Exists(ctx, toks, ""); return err }},
			{"Lookup", func(ctx context.Context, toks []int64) error {
				_, err := m.Lookup(ctx, LookupRequest{Tokens: toks})
				return err
			}},
			{"Delete", func(ctx context.Context, toks []int64) error { _, err := m.Delete(ctx, toks, ""); return err }},
			{"Prefetch", func(ctx context.Context, toks []int64) error { _, err := m.Prefetch(ctx, toks, ""); return err }},
		}
		for _, q := range queries {
			if err := q.call(nilCtx, bad); !errors.Is(err, ErrNilContext) {
				t.Errorf("pinned %d: %s(nil ctx) of a token outside the vocabulary: %v, want ErrNilContext", pinned, q.name, err)
			}
		}
		if err := m.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, q := range queries {
			for _, toks := range [][]int64{bad, {1, 2}} {
				if err := q.call(context.Background(), toks); !errors.Is(err, ErrClosed) {
					t.Errorf("pinned %d: %s(%v) after Close: %v, want ErrClosed", pinned, q.name, toks, err)
				}
			}
		}
	}
}
