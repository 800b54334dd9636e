package kvtier

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestCommitNegativeCount: a negative count other than AllTokens is
// ErrBadCommit saying so, not "past the sequence's tokens".
func TestCommitNegativeCount(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Config{GPUBlocks: 4})
	if _, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: toks(0, 2*bt)}); err != nil {
		t.Fatal(err)
	}
	err := m.Commit(ctx, 1, -2)
	if !errors.Is(err, ErrBadCommit) || !strings.Contains(err.Error(), "negative token count") || strings.Contains(err.Error(), "past") {
		t.Fatalf("Commit(-2): %v", err)
	}
	if err := m.Commit(ctx, 1, AllTokens); err != nil {
		t.Fatalf("Commit(AllTokens) after a refused one: %v", err)
	}
}

// TestRootErrorsMatch: the errors a caller branches on match the root
// package's values under errors.Is.
func TestRootErrorsMatch(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Config{GPUBlocks: 8, VocabSize: 1000})
	if _, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: toks(0, bt)}); err != nil {
		t.Fatal(err)
	}
	_, errExists := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: toks(0, bt)})
	_, errEmpty := m.Allocate(ctx, AllocRequest{Seq: 2})
	_, errRange := m.Allocate(ctx, AllocRequest{Seq: 3, Tokens: []int64{1, 5000}})
	res, _ := m.AllocateBatch(ctx, []AllocRequest{{Seq: 4, Tokens: toks(0, bt)}, {Seq: 4, Tokens: toks(0, bt)}})
	var errBatch error
	for _, r := range res {
		if r.Err != nil {
			errBatch = r.Err
		}
	}
	cases := []struct {
		name   string
		err    error
		target error
	}{
		{"Allocate of a held sequence", errExists, ErrSequenceExists},
		{"Allocate of no tokens", errEmpty, ErrEmptySequence},
		{"token beyond VocabSize", errRange, ErrTokenOutOfRange},
		{"batch naming a sequence twice", errBatch, ErrBadArgument},
		{"Commit of an unknown sequence", m.Commit(ctx, 9, AllTokens), ErrUnknownSequence},
		{"Free of an unknown sequence", m.Free(ctx, 9), ErrUnknownSequence},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.target) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.target)
		}
	}
}
