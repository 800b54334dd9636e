package gpu

import (
	"fmt"
	"math"
)

// TensorView describes a strided tensor inside a byte storage of known
// size: a device arena, a block, a pinned host buffer. It does not own or
// even reference the storage; it only turns indices into byte offsets and
// guarantees, at construction, that every addressable element lies inside
// the storage. A TensorView is an immutable value and safe to share.
type TensorView struct {
	dtype       DType
	shape       []int
	strides     []int // in elements
	byteStrides []int // strides x element size
	offset      int   // byte offset of element (0, ..., 0)
	storage     int   // size of the storage in bytes
}

// NewTensorView builds a view of a storage of storageBytes bytes. strides
// are in elements; nil means row-major contiguous for shape. offset is the
// byte offset of the first element. It fails with ErrShape when strides
// do not match shape or a dimension or stride is negative, with
// ErrInvalidSpec for an unknown dtype, and with ErrOutOfRange when any
// addressable element would fall outside [0, storageBytes). A view with a
// zero-sized dimension addresses nothing and only needs offset <=
// storageBytes. The shape and strides are copied.
func NewTensorView(storageBytes int, dtype DType, shape, strides []int, offset int) (TensorView, error) {
	if !dtype.Valid() {
		return TensorView{}, fmt.Errorf("%w: dtype %v", ErrInvalidSpec, dtype)
	}
	if strides != nil && len(strides) != len(shape) {
		return TensorView{}, fmt.Errorf("%w: %d strides for rank %d", ErrShape, len(strides), len(shape))
	}
	if storageBytes < 0 || offset < 0 || offset > storageBytes {
		return TensorView{}, fmt.Errorf("%w: offset %d in storage of %d bytes", ErrOutOfRange, offset, storageBytes)
	}
	v := TensorView{
		dtype:       dtype,
		shape:       append([]int(nil), shape...),
		strides:     make([]int, len(shape)),
		byteStrides: make([]int, len(shape)),
		offset:      offset,
		storage:     storageBytes,
	}
	size := dtype.Size()
	empty := false
	elems := 1 // NumElements and NumBytes must not overflow, broadcast or not
	for i, n := range shape {
		if n < 0 {
			return TensorView{}, fmt.Errorf("%w: dimension %d is %d", ErrShape, i, n)
		}
		empty = empty || n == 0
		var ok bool
		if elems, ok = mulAll(elems, n); !ok {
			return TensorView{}, fmt.Errorf("%w: shape %v overflows", ErrOutOfRange, shape)
		}
	}
	if _, ok := mulAll(elems, size); !ok {
		return TensorView{}, fmt.Errorf("%w: shape %v overflows in bytes", ErrOutOfRange, shape)
	}
	if strides == nil {
		acc := 1
		for i := len(shape) - 1; i >= 0; i-- {
			v.strides[i] = acc
			var ok bool
			if acc, ok = mulAll(acc, max(shape[i], 1)); !ok {
				return TensorView{}, fmt.Errorf("%w: shape %v overflows", ErrOutOfRange, shape)
			}
		}
	} else {
		for i, s := range strides {
			if s < 0 {
				return TensorView{}, fmt.Errorf("%w: stride %d is %d", ErrShape, i, s)
			}
			v.strides[i] = s
		}
	}
	// reach is one past the last byte any element can touch.
	if !empty && offset > math.MaxInt-size {
		return TensorView{}, fmt.Errorf("%w: offset %d overflows", ErrOutOfRange, offset)
	}
	reach := offset + size // unused (and free to wrap) for an empty view
	for i := range shape {
		bs, ok := mulAll(v.strides[i], size)
		if !ok {
			return TensorView{}, fmt.Errorf("%w: stride %d overflows", ErrOutOfRange, i)
		}
		v.byteStrides[i] = bs
		if empty {
			continue
		}
		span, ok := mulAll(shape[i]-1, bs)
		if !ok || reach > math.MaxInt-span {
			return TensorView{}, fmt.Errorf("%w: view overflows", ErrOutOfRange)
		}
		reach += span
	}
	if !empty && reach > storageBytes {
		return TensorView{}, fmt.Errorf("%w: view reaches byte %d of %d-byte storage", ErrOutOfRange, reach, storageBytes)
	}
	return v, nil
}

// DType returns the element type.
func (v TensorView) DType() DType { return v.dtype }

// Rank returns the number of dimensions.
func (v TensorView) Rank() int { return len(v.shape) }

// Shape returns a copy of the shape.
func (v TensorView) Shape() []int { return append([]int(nil), v.shape...) }

// Strides returns a copy of the strides, in elements.
func (v TensorView) Strides() []int { return append([]int(nil), v.strides...) }

// ByteStrides returns a copy of the strides, in bytes.
func (v TensorView) ByteStrides() []int { return append([]int(nil), v.byteStrides...) }

// Offset returns the byte offset of the first element in the storage.
func (v TensorView) Offset() int { return v.offset }

// StorageBytes returns the size of the storage the view was checked against.
func (v TensorView) StorageBytes() int { return v.storage }

// NumElements returns the number of addressable elements.
func (v TensorView) NumElements() int {
	n := 1
	for _, d := range v.shape {
		n *= d
	}
	return n
}

// NumBytes returns NumElements x element size: the bytes the view's
// elements occupy, not the span they are spread over.
func (v TensorView) NumBytes() int { return v.NumElements() * v.dtype.Size() }

// IsContiguous reports whether the elements are packed row-major with no
// gaps, so the view is the byte range [Offset, Offset+NumBytes).
func (v TensorView) IsContiguous() bool {
	want := 1
	for i := len(v.shape) - 1; i >= 0; i-- {
		if v.shape[i] != 1 && v.strides[i] != want {
			return false
		}
		want *= v.shape[i]
	}
	return true
}

// Address returns the byte offset in the storage of the element at idx.
// It fails with ErrShape when len(idx) is not the rank and with
// ErrOutOfRange when an index is outside its dimension.
func (v TensorView) Address(idx ...int) (int, error) {
	if len(idx) != len(v.shape) {
		return 0, fmt.Errorf("%w: %d indices for rank %d", ErrShape, len(idx), len(v.shape))
	}
	off := v.offset
	for i, x := range idx {
		if x < 0 || x >= v.shape[i] {
			return 0, fmt.Errorf("%w: index %d is %d, dimension is %d", ErrOutOfRange, i, x, v.shape[i])
		}
		off += x * v.byteStrides[i]
	}
	return off, nil
}

// Slice returns the view restricted to [start, end) along dim, with the
// same strides. It fails with ErrShape for a dimension outside the rank
// and with ErrOutOfRange unless 0 <= start <= end <= Shape()[dim].
func (v TensorView) Slice(dim, start, end int) (TensorView, error) {
	if dim < 0 || dim >= len(v.shape) {
		return TensorView{}, fmt.Errorf("%w: dimension %d for rank %d", ErrShape, dim, len(v.shape))
	}
	if start < 0 || start > end || end > v.shape[dim] {
		return TensorView{}, fmt.Errorf("%w: slice [%d,%d) of dimension %d of size %d",
			ErrOutOfRange, start, end, dim, v.shape[dim])
	}
	s := v
	s.shape = append([]int(nil), v.shape...)
	s.shape[dim] = end - start
	if s.NumElements() > 0 {
		// An empty result keeps the parent's offset, which is known valid;
		// a non-empty one addresses a subset of the parent's elements.
		s.offset += start * v.byteStrides[dim]
	}
	return s, nil
}

// String describes the view, for logs and test failures.
func (v TensorView) String() string {
	return fmt.Sprintf("TensorView{%v shape=%v strides=%v offset=%d storage=%d}",
		v.dtype, v.shape, v.strides, v.offset, v.storage)
}
