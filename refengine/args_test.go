package refengine

import (
	"errors"
	"math"
	"testing"
)

func TestForwardRejectsBadArguments(t *testing.T) {
	m := mustModel(t, TinyConfig)
	vocab := int64(TinyConfig.Vocab)
	tests := []struct {
		name   string
		kv     KVStore
		tokens []int64
		start  int
		want   error
		arg    string // for *ArgError
		index  int    // for *TokenError
	}{
		{"nil store", nil, []int64{1}, 0, ErrBadArgument, "kv", 0},
		{"empty tokens", m.NewMemKV(), []int64{}, 0, ErrBadArgument, "tokens", 0},
		{"negative start", m.NewMemKV(), []int64{1}, -1, ErrBadArgument, "start", 0},
		{"past MaxPositions", m.NewMemKV(), []int64{1, 2}, MaxPositions - 1, ErrBadArgument, "start", 0},
		{"negative token", m.NewMemKV(), []int64{1, -1}, 0, ErrTokenOutOfRange, "", 1},
		{"token = vocab", m.NewMemKV(), []int64{vocab}, 0, ErrTokenOutOfRange, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, call := range []func() error{
				func() error { _, err := m.Forward(tt.kv, tt.tokens, tt.start); return err },
				func() error { _, err := m.ForwardLast(tt.kv, tt.tokens, tt.start); return err },
				func() error { _, _, err := m.Generate(tt.kv, tt.tokens, tt.start, 2); return err },
			} {
				err := call()
				if !errors.Is(err, tt.want) {
					t.Fatalf("err = %v, want %v", err, tt.want)
				}
				var ae *ArgError
				var te *TokenError
				switch {
				case tt.arg != "":
					if !errors.As(err, &ae) || ae.Arg != tt.arg {
						t.Fatalf("err = %#v, want *ArgError for %q", err, tt.arg)
					}
				case !errors.As(err, &te) || te.Index != tt.index || te.Vocab != TinyConfig.Vocab:
					t.Fatalf("err = %#v, want *TokenError at index %d", err, tt.index)
				}
				if kv, ok := tt.kv.(*MemKV); ok && kv.Len() != 0 {
					t.Fatalf("a rejected call wrote %d positions", kv.Len())
				}
			}
		})
	}
}

func TestReferenceRejectsBadTokens(t *testing.T) {
	m := mustModel(t, TinyConfig)
	if _, err := m.Reference(nil); !errors.Is(err, ErrBadArgument) {
		t.Errorf("Reference(nil) = %v, want ErrBadArgument", err)
	}
	if _, err := m.Reference([]int64{0, 1000}); !errors.Is(err, ErrTokenOutOfRange) {
		t.Errorf("Reference(out of vocab) = %v, want ErrTokenOutOfRange", err)
	}
	if _, _, err := m.ReferenceGenerate([]int64{1}, -1); !errors.Is(err, ErrBadArgument) {
		t.Errorf("ReferenceGenerate(n=-1) = %v, want ErrBadArgument", err)
	}
	if _, _, err := m.ReferenceGenerate([]int64{-5}, 1); !errors.Is(err, ErrTokenOutOfRange) {
		t.Errorf("ReferenceGenerate(bad token) = %v, want ErrTokenOutOfRange", err)
	}
	if _, _, err := m.Generate(m.NewMemKV(), []int64{1}, 0, -1); !errors.Is(err, ErrBadArgument) {
		t.Errorf("Generate(n=-1) = %v, want ErrBadArgument", err)
	}
}

// failKV fails every write, or every read, with err.
type failKV struct {
	MemKV
	failWrites bool
	err        error
}

func (f *failKV) WriteKV(layer, pos int, k, v []float32) error {
	if f.failWrites {
		return f.err
	}
	return f.MemKV.WriteKV(layer, pos, k, v)
}

func (f *failKV) ReadKV(layer, pos int, k, v []float32) error {
	if !f.failWrites {
		return f.err
	}
	return f.MemKV.ReadKV(layer, pos, k, v)
}

func TestForwardWrapsStoreErrors(t *testing.T) {
	m := mustModel(t, TinyConfig)
	storeErr := errors.New("arena block evicted")
	for _, failWrites := range []bool{true, false} {
		kv := &failKV{MemKV: *m.NewMemKV(), failWrites: failWrites, err: storeErr}
		_, err := m.Forward(kv, []int64{1, 2}, 0)
		var ke *KVError
		if !errors.As(err, &ke) || !errors.Is(err, storeErr) {
			t.Fatalf("failWrites=%v: err = %v, want a *KVError wrapping the store's error", failWrites, err)
		}
		wantOp := map[bool]string{true: "write", false: "read"}[failWrites]
		if ke.Op != wantOp || ke.Layer != 0 || ke.Pos != 0 {
			t.Fatalf("failWrites=%v: %+v, want op %s layer 0 pos 0", failWrites, ke, wantOp)
		}
	}

	// Continuing a sequence whose prefix was never stored.
	_, err := m.Forward(m.NewMemKV(), []int64{1}, 3)
	var ke *KVError
	if !errors.As(err, &ke) || !errors.Is(err, ErrNotWritten) || ke.Op != "read" || ke.Pos != 0 {
		t.Fatalf("Forward over an empty store at start 3 = %v, want a read *KVError at pos 0 wrapping ErrNotWritten", err)
	}
}

func TestMemKVRejectsBadArguments(t *testing.T) {
	if _, err := NewMemKV(0, 4); !errors.Is(err, ErrBadArgument) {
		t.Errorf("NewMemKV(0, 4) = %v, want ErrBadArgument", err)
	}
	if _, err := NewMemKV(2, -1); !errors.Is(err, ErrBadArgument) {
		t.Errorf("NewMemKV(2, -1) = %v, want ErrBadArgument", err)
	}
	kv, err := NewMemKV(2, 4)
	if err != nil {
		t.Fatal(err)
	}
	ok, short := make([]float32, 4), make([]float32, 3)
	for _, tt := range []struct {
		name       string
		layer, pos int
		k, v       []float32
		arg        string
	}{
		{"layer", 2, 0, ok, ok, "layer"},
		{"negative layer", -1, 0, ok, ok, "layer"},
		{"pos", 0, -1, ok, ok, "pos"},
		{"k", 0, 0, short, ok, "k"},
		{"v", 0, 0, ok, short, "v"},
	} {
		for op, call := range map[string]func(int, int, []float32, []float32) error{"read": kv.ReadKV, "write": kv.WriteKV} {
			var ae *ArgError
			if err := call(tt.layer, tt.pos, tt.k, tt.v); !errors.As(err, &ae) || ae.Arg != tt.arg {
				t.Errorf("%s %s: err = %v, want *ArgError for %q", op, tt.name, err, tt.arg)
			}
		}
	}
	if kv.Len() != 0 {
		t.Fatalf("rejected writes grew the store to %d", kv.Len())
	}

	// A write past the end leaves a gap that reads as not written.
	k := []float32{1, 2, 3, 4}
	if err := kv.WriteKV(1, 3, k, k); err != nil {
		t.Fatal(err)
	}
	if kv.Len() != 4 {
		t.Fatalf("Len = %d, want 4", kv.Len())
	}
	if err := kv.ReadKV(1, 2, ok, ok); !errors.Is(err, ErrNotWritten) {
		t.Fatalf("read of a gap = %v, want ErrNotWritten", err)
	}
	if err := kv.ReadKV(0, 3, ok, ok); !errors.Is(err, ErrNotWritten) {
		t.Fatalf("read of another layer = %v, want ErrNotWritten", err)
	}
	got := make([]float32, 4)
	if err := kv.ReadKV(1, 3, got, ok); err != nil || got[3] != 4 {
		t.Fatalf("read back = %v, %v", got, err)
	}
	k[3] = 99 // the store copied on write
	if err := kv.ReadKV(1, 3, got, ok); err != nil || got[3] != 4 {
		t.Fatalf("the store retained the caller's slice: read %v, %v", got, err)
	}
}

// TestMemKVRejectsPositionsPastMax: a position at or past MaxPositions is a
// typed error that leaves the store as it was, not an overflow panic.
func TestMemKVRejectsPositionsPastMax(t *testing.T) {
	kv, err := NewMemKV(2, 4)
	if err != nil {
		t.Fatal(err)
	}
	k := make([]float32, 4)
	for _, pos := range []int{MaxPositions, math.MaxInt / 4, math.MaxInt} {
		if err := kv.WriteKV(0, pos, k, k); !errors.Is(err, ErrBadArgument) {
			t.Errorf("WriteKV(0, %d) = %v, want ErrBadArgument", pos, err)
		}
	}
	if kv.Len() != 0 {
		t.Fatalf("the store grew to %d", kv.Len())
	}
}

// TestGenerateRejectsHugeN: an n so large that start+len(prompt)+n
// overflows is an *ArgError for "n", not a panic in make (the overflowed
// sum passed the MaxPositions check).
func TestGenerateRejectsHugeN(t *testing.T) {
	m := mustModel(t, TinyConfig)
	for _, n := range []int{MaxPositions, math.MaxInt - 1, math.MaxInt} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("n=%d: panic %v", n, r)
				}
			}()
			var ae *ArgError
			if _, _, err := m.Generate(m.NewMemKV(), []int64{1, 2, 3}, 2, n); !errors.As(err, &ae) || ae.Arg != "n" {
				t.Errorf("Generate(n=%d) = %v, want an *ArgError for n", n, err)
			}
			if _, _, err := m.ReferenceGenerate([]int64{1, 2, 3}, n); !errors.As(err, &ae) || ae.Arg != "n" {
				t.Errorf("ReferenceGenerate(n=%d) = %v, want an *ArgError for n", n, err)
			}
		}()
	}
}
