package refengine

import "fmt"

// KVStore holds the keys and values the model computes, addressed by
// layer and absolute token position. k and v each hold KVHeads*HeadDim
// float32s laid out [head][dim]: kvtier backs it with its block arena,
// MemKV with Go slices.
//
// Ownership: the slices belong to the model. WriteKV must copy k and v
// before it returns (the model reuses them); ReadKV must fill all of k and
// v and not retain them. The K passed to WriteKV already has the rotary
// embedding of position pos applied, so it is only valid at pos: a store
// that returns it for another position changes the logits.
//
// The model writes each (layer, pos) it computes exactly once per
// Forward, before it reads it back, and reads positions 0..end-1 of a
// layer after writing that layer's new positions. A store returns an error
// for a position it does not hold (MemKV returns ErrNotWritten); Forward
// wraps it in a *KVError and stops.
type KVStore interface {
	// ReadKV fills k and v with the K and V of one layer at one position.
	ReadKV(layer, pos int, k, v []float32) error
	// WriteKV stores copies of k and v as the K and V of one layer at one
	// position, replacing what was there.
	WriteKV(layer, pos int, k, v []float32) error
}

// MemKV is a KVStore in Go memory, growing as positions are written. It is
// the store Reference uses and the simplest one to test against. It is not
// safe for concurrent use.
type MemKV struct {
	layers, kvDim int
	k, v          [][]float32 // per layer, [pos][kvDim] flattened
	written       [][]bool    // per layer, per position
}

// NewMemKV returns an empty store for layers layers of kvDim floats per
// position (use Model.NewMemKV for a model's shape). It fails with
// ErrBadArgument if either is not positive.
func NewMemKV(layers, kvDim int) (*MemKV, error) {
	if layers <= 0 {
		return nil, &ArgError{Arg: "layers", Value: layers, Reason: "must be positive"}
	}
	if kvDim <= 0 {
		return nil, &ArgError{Arg: "kvDim", Value: kvDim, Reason: "must be positive"}
	}
	return &MemKV{
		layers:  layers,
		kvDim:   kvDim,
		k:       make([][]float32, layers),
		v:       make([][]float32, layers),
		written: make([][]bool, layers),
	}, nil
}

// NewMemKV returns an empty MemKV shaped for m.
func (m *Model) NewMemKV() *MemKV {
	kv, err := NewMemKV(m.cfg.Layers, m.kvDim)
	if err != nil {
		panic("kvtier: refengine: MemKV of a valid model: " + err.Error())
	}
	return kv
}

// Len returns one past the highest position written in any layer, 0 for
// an empty store.
func (s *MemKV) Len() int {
	n := 0
	for _, w := range s.written {
		n = max(n, len(w))
	}
	return n
}

// Truncate forgets every position >= n, as a cache does when a sequence is
// rolled back; reading them again fails with ErrNotWritten.
func (s *MemKV) Truncate(n int) {
	n = max(n, 0)
	for l := range s.written {
		if len(s.written[l]) > n {
			s.written[l] = s.written[l][:n]
			s.k[l] = s.k[l][:n*s.kvDim]
			s.v[l] = s.v[l][:n*s.kvDim]
		}
	}
}

// Clone returns an independent deep copy, like a forked sequence that
// shares a prefix.
func (s *MemKV) Clone() *MemKV {
	c := &MemKV{
		layers:  s.layers,
		kvDim:   s.kvDim,
		k:       make([][]float32, s.layers),
		v:       make([][]float32, s.layers),
		written: make([][]bool, s.layers),
	}
	for l := range s.layers {
		c.k[l] = append([]float32(nil), s.k[l]...)
		c.v[l] = append([]float32(nil), s.v[l]...)
		c.written[l] = append([]bool(nil), s.written[l]...)
	}
	return c
}

// ReadKV implements KVStore. It fails with ErrBadArgument for a layer,
// position or slice length that does not fit the store, and with
// ErrNotWritten for a position that holds nothing.
func (s *MemKV) ReadKV(layer, pos int, k, v []float32) error {
	if err := s.check(layer, pos, k, v); err != nil {
		return err
	}
	if pos >= len(s.written[layer]) || !s.written[layer][pos] {
		return fmt.Errorf("%w: layer %d pos %d", ErrNotWritten, layer, pos)
	}
	off := pos * s.kvDim
	copy(k, s.k[layer][off:off+s.kvDim])
	copy(v, s.v[layer][off:off+s.kvDim])
	return nil
}

// WriteKV implements KVStore. Writing past the end grows the store; the
// positions skipped over stay unwritten.
func (s *MemKV) WriteKV(layer, pos int, k, v []float32) error {
	if err := s.check(layer, pos, k, v); err != nil {
		return err
	}
	if n := pos + 1; n > len(s.written[layer]) {
		s.written[layer] = append(s.written[layer], make([]bool, n-len(s.written[layer]))...)
		s.k[layer] = append(s.k[layer], make([]float32, n*s.kvDim-len(s.k[layer]))...)
		s.v[layer] = append(s.v[layer], make([]float32, n*s.kvDim-len(s.v[layer]))...)
	}
	off := pos * s.kvDim
	copy(s.k[layer][off:off+s.kvDim], k)
	copy(s.v[layer][off:off+s.kvDim], v)
	s.written[layer][pos] = true
	return nil
}

func (s *MemKV) check(layer, pos int, k, v []float32) error {
	switch {
	case layer < 0 || layer >= s.layers:
		return &ArgError{Arg: "layer", Value: layer, Reason: fmt.Sprintf("outside [0,%d)", s.layers)}
	case pos < 0:
		return &ArgError{Arg: "pos", Value: pos, Reason: "must not be negative"}
	case pos >= MaxPositions:
		return &ArgError{Arg: "pos", Value: pos, Reason: fmt.Sprintf("must be below MaxPositions (%d)", MaxPositions)}
	case len(k) != s.kvDim:
		return &ArgError{Arg: "k", Value: len(k), Reason: fmt.Sprintf("length must be %d", s.kvDim)}
	case len(v) != s.kvDim:
		return &ArgError{Arg: "v", Value: len(v), Reason: fmt.Sprintf("length must be %d", s.kvDim)}
	}
	return nil
}
