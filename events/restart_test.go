package events

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/kvtier/kvtier/messages"
)

func storedGPU(h uint64) *messages.Residency {
	return &messages.Residency{Tier: messages.GPU, Changes: []messages.ResidencyChange{{Stored: true, Hash: h, Tokens: []int64{int64(h)}}}}
}

// run publishes Start, then a store of each hash, a second apart from
// start; it returns the frames.
func run(p *Publisher, start time.Time, hs ...uint64) []Frame {
	fs := []Frame{p.Start(start)}
	for i, h := range hs {
		f, ok := p.Apply(storedGPU(h), start.Add(time.Duration(i+1)*time.Second))
		if !ok {
			panic("events test: nothing published")
		}
		fs = append(fs, f)
	}
	return fs
}

func applyAll(t *testing.T, v *View, fs []Frame) {
	t.Helper()
	for _, f := range fs {
		if err := v.Apply(f.Seq, f.Payload); err != nil {
			t.Fatalf("batch %d: %v", f.Seq, err)
		}
	}
}

// TestFirstSeq: a publisher numbered from Config.FirstSeq numbers, replays
// and snapshots from there; a view that followed an earlier run sees the
// restarted publisher's batches as a gap (whether or not it saw the new
// run's first batch) and resynchronises from a snapshot.
func TestFirstSeq(t *testing.T) {
	const first uint64 = 1_700_000_000_000_000_000
	now := time.Unix(1000, 0)
	p := NewPublisher(Config{BlockSize: 1, BufferSteps: 4, FirstSeq: first})
	if _, ok := p.LastSeq(); ok {
		t.Fatal("LastSeq before any batch")
	}
	if s := p.Snapshot(now); s.Seq != first-1 {
		t.Fatalf("snapshot before any batch numbered %d, want %d", s.Seq, first-1)
	}
	v := NewView()
	fs := run(p, now, 1, 2, 3, 4, 5)
	for i, f := range fs {
		if f.Seq != first+uint64(i) {
			t.Fatalf("batch %d numbered %d", i, f.Seq)
		}
	}
	if last, ok := p.LastSeq(); !ok || last != first+5 {
		t.Fatalf("LastSeq %d %v", last, ok)
	}
	applyAll(t, v, fs)
	seqs := func(fs []Frame) (out []uint64) {
		for _, f := range fs {
			out = append(out, f.Seq-first)
		}
		return out
	}
	// The ring keeps the last 4 batches.
	if got := seqs(p.Replay(0)); !slices.Equal(got, []uint64{2, 3, 4, 5}) {
		t.Fatalf("replay from 0: first+%v", got)
	}
	if got := seqs(p.Replay(first + 4)); !slices.Equal(got, []uint64{4, 5}) {
		t.Fatalf("replay from first+4: first+%v", got)
	}
	if got := p.Replay(first + 6); len(got) != 0 {
		t.Fatalf("replay past the last: %v", got)
	}
	applyAll(t, v, p.Replay(first+3)) // duplicates, skipped
	if got := v.Residency()[MediumGPU]; !slices.Equal(got, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("view %v", got)
	}
	// A snapshot is numbered at the last batch; the next batch follows it.
	snap := p.Snapshot(now.Add(time.Minute))
	if snap.Seq != first+5 {
		t.Fatalf("snapshot numbered first+%d", snap.Seq-first)
	}
	w := NewView()
	if err := w.Reset(snap.Seq, snap.Payload); err != nil {
		t.Fatal(err)
	}
	f, _ := p.Apply(storedGPU(6), now.Add(2*time.Minute))
	applyAll(t, w, []Frame{f})
	applyAll(t, v, []Frame{f})
	if !reflect.DeepEqual(w.Residency(), p.Residency()) || !reflect.DeepEqual(v.Residency(), p.Residency()) {
		t.Fatalf("after the snapshot view %v, live view %v, publisher %v", w.Residency(), v.Residency(), p.Residency())
	}

	// The node restarts, numbered from above the first run; the view
	// misses the new run's first batch (AllBlocksCleared).
	p2 := NewPublisher(Config{BlockSize: 1, FirstSeq: first + 1_000_000})
	fs2 := run(p2, now.Add(time.Hour), 100, 101)
	for _, view := range []*View{v, w} {
		before := view.Residency()
		if err := view.Apply(fs2[1].Seq, fs2[1].Payload); !errors.Is(err, ErrGap) {
			t.Fatalf("the restarted run's second batch after the first run's: %v, want ErrGap", err)
		}
		if !reflect.DeepEqual(view.Residency(), before) {
			t.Fatal("a batch refused with ErrGap changed the view")
		}
	}
	// Seeing the new run's first batch is a gap as well.
	if err := w.Apply(fs2[0].Seq, fs2[0].Payload); !errors.Is(err, ErrGap) {
		t.Fatalf("the restarted run's first batch: %v, want ErrGap", err)
	}
	snap2 := p2.Snapshot(now.Add(2 * time.Hour))
	if err := v.Reset(snap2.Seq, snap2.Payload); err != nil {
		t.Fatal(err)
	}
	applyAll(t, v, fs2) // the live batches the snapshot covers: skipped
	if !reflect.DeepEqual(v.Residency(), p2.Residency()) {
		t.Fatalf("after the resync the view holds %v, the publisher %v", v.Residency(), p2.Residency())
	}
}

// TestFirstSeqOverZMQ: replay and snapshot requests by number reach a
// publisher numbered from far above 0.
func TestFirstSeqOverZMQ(t *testing.T) {
	const first uint64 = 1 << 62
	src := &lockedSource{p: NewPublisher(Config{BlockSize: 1, FirstSeq: first})}
	s, err := Listen(ServerConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://*:0", Topic: "kv"}, src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, replayAddr := s.Addrs()
	src.mu.Lock()
	fs := run(src.p, time.Now(), 1, 2, 3)
	src.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := Replay(ctx, replayAddr, first+2)
	if err != nil || !reflect.DeepEqual(got, fs[2:]) {
		t.Fatalf("replay from first+2: %v %v, want %v", got, err, fs[2:])
	}
	snap, err := FetchSnapshot(ctx, replayAddr)
	if err != nil || snap.Seq != first+3 {
		t.Fatalf("snapshot %d %v, want first+3", snap.Seq-first, err)
	}
}

// TestViewRestartMissedFirstBatch: a publisher that restarts numbering
// from 0 (vLLM's way), whose first batch (AllBlocksCleared) a view missed:
// the new run's batches numbered at or below the view's are stamped later
// than the last it applied, so they are a gap, not duplicates; a replay of
// the view's own run is still skipped.
func TestViewRestartMissedFirstBatch(t *testing.T) {
	now := time.Unix(1000, 0)
	v := NewView()
	p1 := NewPublisher(Config{BlockSize: 1})
	fs1 := run(p1, now, 1, 2, 3, 4, 5)
	applyAll(t, v, fs1)
	applyAll(t, v, fs1[1:4]) // a replay overlapping live batches
	if got := v.Residency()[MediumGPU]; !slices.Equal(got, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("after a replay of its own run: %v", got)
	}
	p2 := NewPublisher(Config{BlockSize: 1})
	fs2 := run(p2, now.Add(time.Hour), 100, 101, 102)
	for _, f := range fs2[1:] { // batch 0 lost
		if err := v.Apply(f.Seq, f.Payload); !errors.Is(err, ErrGap) {
			t.Fatalf("restarted run's batch %d: %v, want ErrGap", f.Seq, err)
		}
	}
	if s, _ := v.Seq(); s != 5 || !slices.Equal(v.Residency()[MediumGPU], []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("refused batches changed the view: seq %d, %v", s, v.Residency())
	}
	snap := p2.Snapshot(now.Add(2 * time.Hour))
	if err := v.Reset(snap.Seq, snap.Payload); err != nil {
		t.Fatal(err)
	}
	applyAll(t, v, fs2)
	f, _ := p2.Apply(storedGPU(103), now.Add(3*time.Hour))
	applyAll(t, v, []Frame{f})
	if !reflect.DeepEqual(v.Residency(), p2.Residency()) {
		t.Fatalf("after the resync the view holds %v, the publisher %v", v.Residency(), p2.Residency())
	}
}

// TestResetBadSnapshot: a snapshot that does not decode leaves the view
// as it was, so the batches after it still apply on the right picture.
func TestResetBadSnapshot(t *testing.T) {
	now := time.Unix(1, 0)
	p := NewPublisher(Config{BlockSize: 1})
	v := NewView()
	applyAll(t, v, run(p, now, 1, 2, 3))
	good := p.Snapshot(now).Payload
	for _, bad := range [][]byte{{0x93, 0xcb}, good[:len(good)-1], append(slices.Clone(good), 0xc0)} {
		for _, seq := range []uint64{3, 10} {
			if err := v.Reset(seq, bad); !errors.Is(err, ErrDecode) {
				t.Fatalf("a bad snapshot: %v, want ErrDecode", err)
			}
			if s, ok := v.Seq(); !ok || s != 3 || !reflect.DeepEqual(v.Residency(), p.Residency()) {
				t.Fatalf("a bad snapshot changed the view: seq %d, %v", s, v.Residency())
			}
		}
	}
	f, _ := p.Apply(storedGPU(4), now)
	applyAll(t, v, []Frame{f})
	if !reflect.DeepEqual(v.Residency(), p.Residency()) {
		t.Fatalf("view %v, publisher %v", v.Residency(), p.Residency())
	}
}
