package enginetest

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/gpu"
)

// KV is a refengine.KVStore over a sequence's block table in a Manager's
// arena: the K (or V) of layer l at position p is token p%bt of block
// Table[p/bt]'s (l, K or V) region. It goes through the region API, whose
// token offsets mean the same under every arena layout. A KV is used by one
// goroutine.
type KV struct {
	arena  gpu.Arena
	layout gpu.Layout
	// Table is the sequence's block table; the engine extends it as Append
	// hands out blocks and replaces it when a load outcome swaps blocks.
	Table []kvtier.BlockID
	buf   []byte
}

// NewKV returns a store over table in m's arena.
func NewKV(m *kvtier.Manager, table []kvtier.BlockID) *KV {
	return &KV{arena: m.Arena(), layout: m.Layout(), Table: table}
}

// region returns the one-token region of (layer, pos, kv).
func (s *KV) region(layer, pos int, kv gpu.KV) (gpu.KVRegion, error) {
	bt := s.layout.BlockTokens()
	if pos < 0 || pos/bt >= len(s.Table) {
		return gpu.KVRegion{}, fmt.Errorf("enginetest: position %d outside a table of %d blocks", pos, len(s.Table))
	}
	return gpu.KVRegion{Block: int(s.Table[pos/bt]), Layer: layer, KV: kv, Start: pos % bt, End: pos%bt + 1}, nil
}

// ReadKV implements refengine.KVStore.
func (s *KV) ReadKV(layer, pos int, k, v []float32) error {
	for _, x := range [2]struct {
		kv  gpu.KV
		dst []float32
	}{{gpu.Key, k}, {gpu.Value, v}} {
		r, err := s.region(layer, pos, x.kv)
		if err != nil {
			return err
		}
		s.buf = append(s.buf[:0], make([]byte, 4*len(x.dst))...)
		if err := s.arena.ReadRegion(r, s.buf); err != nil {
			return err
		}
		for i := range x.dst {
			x.dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(s.buf[4*i:]))
		}
	}
	return nil
}

// WriteKV implements refengine.KVStore.
func (s *KV) WriteKV(layer, pos int, k, v []float32) error {
	for _, x := range [2]struct {
		kv  gpu.KV
		src []float32
	}{{gpu.Key, k}, {gpu.Value, v}} {
		r, err := s.region(layer, pos, x.kv)
		if err != nil {
			return err
		}
		s.buf = s.buf[:0]
		for _, f := range x.src {
			s.buf = binary.LittleEndian.AppendUint32(s.buf, math.Float32bits(f))
		}
		if err := s.arena.WriteRegion(r, s.buf); err != nil {
			return err
		}
	}
	return nil
}
