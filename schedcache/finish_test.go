package schedcache

import (
	"context"
	"errors"
	"testing"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/scheduler"
)

// TestFreeFinishedGivesClass: FreeFinished frees the finished sequences
// and gives their blocks the request's class (its output length bucketed,
// policy.OutputClass), which reaches pinned memory's policy as the blocks
// land there (class_hints); with Options.NoClass it frees them only. Lengths
// that differ, a negative count and a sequence named twice are refused with
// ErrBadArgs and free nothing.
func TestFreeFinishedGivesClass(t *testing.T) {
	for _, noClass := range []bool{false, true} {
		ctx := context.Background()
		m := newManager(t, kvtier.Config{GPUBlocks: 4, PinnedBytes: pinnedBytes(t, 32, blockTokens)}) // a last pinned tier: Adaptive
		c := New(m, Options{Sync: true, NoClass: noClass})
		if o := allocOne(t, c, 1, seqTokens(1000, 12)); o.Err != nil { // three full blocks
			t.Fatal(o.Err)
		}
		for _, bad := range []struct {
			seqs []scheduler.SeqID
			gen  []int
		}{{[]scheduler.SeqID{1}, []int{20, 3}}, {[]scheduler.SeqID{1}, []int{-5}}, {[]scheduler.SeqID{1, 1}, []int{20, 20}}} {
			if err := c.FreeFinished(ctx, bad.seqs, bad.gen); !errors.Is(err, ErrBadArgs) {
				t.Fatalf("FreeFinished(%v, %v): %v, want ErrBadArgs", bad.seqs, bad.gen, err)
			}
		}
		if err := c.FreeFinished(ctx, []scheduler.SeqID{1}, []int{20}); err != nil {
			t.Fatal(err) // seq 1 was still held: the refused call freed nothing
		}
		if err := c.Free(ctx, []scheduler.SeqID{1}); err == nil {
			t.Fatal("sequence 1 freed twice")
		}
		for i := range 3 { // push its blocks out of the GPU
			id := scheduler.SeqID(10 + i)
			if o := allocOne(t, c, id, seqTokens(2000+100*i, 16)); o.Err != nil {
				t.Fatal(o.Err)
			}
			if err := c.Free(ctx, []scheduler.SeqID{id}); err != nil {
				t.Fatal(err)
			}
		}
		st, err := m.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := 3.0
		if noClass {
			want = 0
		}
		if got := st.Tier(kvtier.Pinned).Extra["class_hints"]; got != want {
			t.Fatalf("NoClass %v: pinned class hints %v, want %v (the finished request's 3 blocks)", noClass, got, want)
		}
	}
}

// TestFinishCommits: each finished sequence's commit carries no new tokens
// and the class of its own output length.
func TestFinishCommits(t *testing.T) {
	got := finishCommits(nil, []scheduler.SeqID{3, 8, 9}, []int{1, 20, 300})
	want := []kvtier.CommitItem{{Seq: 3, Class: 2}, {Seq: 8, Class: 6}, {Seq: 9, Class: 10}}
	if len(got) != len(want) {
		t.Fatalf("commits %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Seq != want[i].Seq || got[i].Tokens != 0 || got[i].After != nil || got[i].Class != want[i].Class {
			t.Fatalf("commits %+v, want %+v", got, want)
		}
	}
}
