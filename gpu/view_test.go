package gpu

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func TestTensorViewContiguous(t *testing.T) {
	v, err := NewTensorView(2*3*4*2, F16, []int{2, 3, 4}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Strides(); !slices.Equal(got, []int{12, 4, 1}) {
		t.Errorf("Strides = %v", got)
	}
	if got := v.ByteStrides(); !slices.Equal(got, []int{24, 8, 2}) {
		t.Errorf("ByteStrides = %v", got)
	}
	if v.NumElements() != 24 || v.NumBytes() != 48 || !v.IsContiguous() || v.Rank() != 3 {
		t.Errorf("view %v: elements %d bytes %d contiguous %v", v, v.NumElements(), v.NumBytes(), v.IsContiguous())
	}
	// Every element has a distinct address and together they cover the storage.
	seen := make(map[int]bool)
	for i := range 2 {
		for j := range 3 {
			for k := range 4 {
				a, err := v.Address(i, j, k)
				if err != nil {
					t.Fatal(err)
				}
				if want := (i*12 + j*4 + k) * 2; a != want {
					t.Fatalf("Address(%d,%d,%d) = %d, want %d", i, j, k, a, want)
				}
				seen[a] = true
			}
		}
	}
	if len(seen) != 24 {
		t.Errorf("%d distinct addresses, want 24", len(seen))
	}
}

func TestTensorViewAddressErrors(t *testing.T) {
	v, err := NewTensorView(64, F32, []int{4, 4}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		idx  []int
		want error
	}{
		{[]int{1}, ErrShape},
		{[]int{1, 2, 3}, ErrShape},
		{[]int{4, 0}, ErrOutOfRange},
		{[]int{0, -1}, ErrOutOfRange},
	} {
		if _, err := v.Address(c.idx...); !errors.Is(err, c.want) {
			t.Errorf("Address(%v) error = %v, want %v", c.idx, err, c.want)
		}
	}
	if a, err := v.Address(3, 3); err != nil || a != 60 {
		t.Errorf("Address(3,3) = %d, %v; want 60", a, err)
	}
}

func TestTensorViewBounds(t *testing.T) {
	cases := []struct {
		name    string
		storage int
		dtype   DType
		shape   []int
		strides []int
		offset  int
		want    error // nil: valid
	}{
		{"exact fit", 48, F16, []int{2, 3, 4}, nil, 0, nil},
		{"one byte short", 47, F16, []int{2, 3, 4}, nil, 0, ErrOutOfRange},
		{"offset pushes past end", 50, F16, []int{2, 3, 4}, nil, 4, ErrOutOfRange},
		{"offset fits", 52, F16, []int{2, 3, 4}, nil, 4, nil},
		{"negative offset", 48, F16, []int{2}, nil, -1, ErrOutOfRange},
		{"offset past storage", 8, U8, []int{0}, nil, 9, ErrOutOfRange},
		{"empty at end", 8, U8, []int{0, 5}, nil, 8, nil},
		{"negative dim", 8, U8, []int{-1}, nil, 0, ErrShape},
		{"stride rank mismatch", 8, U8, []int{2, 2}, []int{1}, 0, ErrShape},
		{"negative stride", 8, U8, []int{2}, []int{-1}, 0, ErrShape},
		// Transposed 3x4 f32 in a 48-byte buffer: last element at (3*1+2*4)*4.
		{"transposed", 48, F32, []int{4, 3}, []int{1, 4}, 0, nil},
		{"strided gap", 4 * 10, F32, []int{4}, []int{3}, 0, nil}, // reaches (3*3+1)*4 = 40
		{"strided too far", 4*10 - 1, F32, []int{4}, []int{3}, 0, ErrOutOfRange},
		{"broadcast stride 0", 4, F32, []int{1000}, []int{0}, 0, nil},
		{"scalar", 4, F32, nil, nil, 0, nil},
		{"huge overflow", math.MaxInt, U8, []int{math.MaxInt / 2, 4}, nil, 0, ErrOutOfRange},
		// An element past the end whose end wraps below zero (it was
		// accepted), and a broadcast view whose element count overflows
		// (NumElements and NumBytes went negative).
		{"offset near MaxInt", math.MaxInt, F32, []int{1}, nil, math.MaxInt - 1, ErrOutOfRange},
		{"empty near MaxInt", math.MaxInt, F32, []int{0}, nil, math.MaxInt - 1, nil},
		{"broadcast count overflows", 4, F32, []int{math.MaxInt / 2, 4}, []int{0, 0}, 0, ErrOutOfRange},
		{"bad dtype", 8, 0, []int{1}, nil, 0, ErrInvalidSpec},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewTensorView(c.storage, c.dtype, c.shape, c.strides, c.offset)
			if c.want == nil && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("error = %v, want %v", err, c.want)
			}
		})
	}
}

func TestTensorViewDoesNotAliasArguments(t *testing.T) {
	shape, strides := []int{2, 2}, []int{2, 1}
	v, err := NewTensorView(8, U8, shape, strides, 0)
	if err != nil {
		t.Fatal(err)
	}
	shape[0], strides[0] = 100, 100
	got := v.Shape()
	got[1] = 100
	if !slices.Equal(v.Shape(), []int{2, 2}) || !slices.Equal(v.Strides(), []int{2, 1}) {
		t.Errorf("view changed through caller's slices: %v", v)
	}
}

func TestTensorViewSlice(t *testing.T) {
	// [layer=2][kv=2][token=4][dim=3] of u8 at offset 10 in a 64-byte storage.
	v, err := NewTensorView(64, U8, []int{2, 2, 4, 3}, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	s, err := v.Slice(2, 1, 3) // tokens 1 and 2
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Shape(), []int{2, 2, 2, 3}) || s.Offset() != 10+3 {
		t.Fatalf("slice %v", s)
	}
	if s.IsContiguous() {
		t.Error("token slice of a multi-layer view reported contiguous")
	}
	// An element of the slice is the same byte as in the parent.
	a, _ := s.Address(1, 1, 1, 2)
	b, _ := v.Address(1, 1, 2, 2)
	if a != b {
		t.Errorf("slice address %d, parent %d", a, b)
	}
	if _, err := s.Address(0, 0, 2, 0); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("index past the slice: %v", err)
	}
	layer1, err := v.Slice(0, 1, 2)
	if err != nil || !layer1.IsContiguous() || layer1.Offset() != 10+24 {
		t.Errorf("layer slice %v, %v", layer1, err)
	}
	empty, err := v.Slice(0, 2, 2)
	if err != nil || empty.NumElements() != 0 || empty.Offset() != v.Offset() {
		t.Errorf("empty slice %v, %v", empty, err)
	}
	for _, c := range []struct {
		dim, start, end int
		want            error
	}{
		{-1, 0, 1, ErrShape}, {4, 0, 1, ErrShape},
		{0, -1, 1, ErrOutOfRange}, {0, 1, 0, ErrOutOfRange}, {2, 0, 5, ErrOutOfRange},
	} {
		if _, err := v.Slice(c.dim, c.start, c.end); !errors.Is(err, c.want) {
			t.Errorf("Slice(%d,%d,%d) error = %v, want %v", c.dim, c.start, c.end, err, c.want)
		}
	}
}

// TestTensorViewSliceStaysInBounds slices random views at random places and
// checks every element of the result is addressable inside the storage.
func TestTensorViewSliceStaysInBounds(t *testing.T) {
	v, err := NewTensorView(4*5*6*2+6, BF16, []int{4, 5, 6}, nil, 6)
	if err != nil {
		t.Fatal(err)
	}
	for dim := range 3 {
		n := v.Shape()[dim]
		for start := 0; start <= n; start++ {
			for end := start; end <= n; end++ {
				s, err := v.Slice(dim, start, end)
				if err != nil {
					t.Fatal(err)
				}
				sh := s.Shape()
				for i := range sh[0] {
					for j := range sh[1] {
						for k := range sh[2] {
							a, err := s.Address(i, j, k)
							if err != nil || a < 0 || a+2 > s.StorageBytes() {
								t.Fatalf("slice %v element (%d,%d,%d) at %d, %v", s, i, j, k, a, err)
							}
						}
					}
				}
			}
		}
	}
}
