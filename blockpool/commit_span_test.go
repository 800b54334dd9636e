package blockpool

import (
	"errors"
	"testing"
)

// TestCommitSpan: CommitSpan reports the committed count before and after
// each commit as Committed would, publishes as Commit does, and a refused
// commit reports the count it left unchanged.
func TestCommitSpan(t *testing.T) {
	p := newPool(t, 8, 4)
	if _, err := p.Allocate(1, seq(10, 1), ""); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		tokens, was, now, published int
		err                         error
	}{
		{tokens: 0, was: 0, now: 0},
		{tokens: 6, was: 0, now: 6, published: 1},
		{tokens: 6, was: 6, now: 6}, // a repeat: nothing new
		{tokens: 3, was: 6, now: 6}, // below the count: nothing changes
		{tokens: 11, was: 6, now: 6, err: ErrBadCommit},
		{tokens: -2, was: 6, now: 6, err: ErrBadCommit},
		{tokens: AllTokens, was: 6, now: 10, published: 1},
	}
	for i, s := range steps {
		pub, was, now, err := p.CommitSpan(1, s.tokens, nil)
		if !errors.Is(err, s.err) || (s.err == nil) != (err == nil) {
			t.Fatalf("step %d: commit of %d: error %v, want %v", i, s.tokens, err, s.err)
		}
		if was != s.was || now != s.now || len(pub) != s.published {
			t.Fatalf("step %d: commit of %d: was %d now %d published %d, want %d %d %d", i, s.tokens, was, now, len(pub), s.was, s.now, s.published)
		}
		if c, _ := p.Committed(1); c != now {
			t.Fatalf("step %d: Committed %d, CommitSpan said %d", i, c, now)
		}
	}
	if _, _, _, err := p.CommitSpan(2, 4, nil); !errors.Is(err, ErrUnknownSequence) {
		t.Fatalf("unknown sequence: %v, want ErrUnknownSequence", err)
	}
	check(t, p)
}
