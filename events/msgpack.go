package events

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The msgpack encoder writes what Python's msgspec writes for the same
// values: integers in their shortest form, strings and containers with the
// shortest header, floats as float64 — except block hashes, always 0xcf
// uint64, so a consumer decodes every hash into one integer type.

func appendNil(b []byte) []byte { return append(b, 0xc0) }

func appendArrayHeader(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
	}
}

func appendMapHeader(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x80|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, 0xdf), uint32(n))
	}
}

func appendString(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

// appendInt writes v in the shortest msgpack integer form.
func appendInt(b []byte, v int64) []byte {
	if v >= 0 {
		return appendUint(b, uint64(v))
	}
	switch {
	case v >= -32:
		return append(b, byte(int8(v)))
	case v >= math.MinInt8:
		return append(b, 0xd0, byte(int8(v)))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(int16(v)))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(int32(v)))
	default:
		return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
	}
}

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v < 128:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	default:
		return appendUint64(b, v)
	}
}

// appendUint64 writes v as a msgpack uint64 (0xcf), whatever its size.
func appendUint64(b []byte, v uint64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

func appendFloat64(b []byte, f float64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xcb), math.Float64bits(f))
}

// ErrDecode is wrapped by every error decoding a payload.
var ErrDecode = errors.New("kvtier: events: bad msgpack payload")

// U64 is a decoded msgpack uint64 (0xcf): the form block hashes must take.
// Every other integer decodes as int64 (or uint64 above MaxInt64 only in
// this form).
type U64 uint64

// decoder reads msgpack values into nil, bool, int64, U64, float64,
// string, []byte, []any and map[string]any (string keys only: the event
// schema's).
//
// Nothing is allocated on a length prefix's word alone: a container claims
// its elements from a budget of the payload's bytes (every element of
// every container starts at a byte of its own, so the claims of a
// well-formed payload never add up to more than its length), its slice or
// map starts small and grows as elements actually decode, and nesting is
// checked before a container's header is read.
type decoder struct {
	b      []byte
	off    int
	budget int // elements the containers still to come may claim
}

const (
	maxDepth    = 32 // containers nest at most this deep
	maxPrealloc = 16 // elements a container's slice or map is made with
)

func newDecoder(b []byte) *decoder { return &decoder{b: b, budget: len(b)} }

func (d *decoder) fail(format string, a ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", ErrDecode, d.off, fmt.Sprintf(format, a...))
}

func (d *decoder) take(n int) ([]byte, error) {
	if n < 0 || len(d.b)-d.off < n {
		return nil, d.fail("truncated (%d bytes wanted, %d left)", n, len(d.b)-d.off)
	}
	s := d.b[d.off : d.off+n]
	d.off += n
	return s, nil
}

func (d *decoder) length(n int) (int, error) {
	s, err := d.take(n)
	if err != nil {
		return 0, err
	}
	switch n {
	case 1:
		return int(s[0]), nil
	case 2:
		return int(binary.BigEndian.Uint16(s)), nil
	default:
		return int(binary.BigEndian.Uint32(s)), nil
	}
}

// value decodes one value at nesting depth depth (the payload's outermost
// value is at 0).
func (d *decoder) value(depth int) (any, error) {
	if depth > maxDepth {
		return nil, d.fail("nested deeper than %d", maxDepth)
	}
	if d.off >= len(d.b) {
		return nil, d.fail("truncated (a value wanted, none left)")
	}
	c := d.b[d.off]
	switch {
	case c&0xf0 == 0x80, c == 0xde, c == 0xdf:
		n, err := d.mapHeader(depth)
		if err != nil {
			return nil, err
		}
		return d.mapOf(n, depth)
	case c&0xf0 == 0x90, c == 0xdc, c == 0xdd:
		n, err := d.arrayHeader(depth)
		if err != nil {
			return nil, err
		}
		return d.arrayOf(n, depth)
	}
	d.off++
	switch {
	case c < 0x80:
		return int64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	case c&0xe0 == 0xa0:
		return d.str(int(c & 0x1f))
	}
	switch c {
	case 0xc0:
		return nil, nil
	case 0xc2:
		return false, nil
	case 0xc3:
		return true, nil
	case 0xc4, 0xc5, 0xc6:
		n, err := d.length(1 << (c - 0xc4))
		if err != nil {
			return nil, err
		}
		s, err := d.take(n)
		return append([]byte(nil), s...), err
	case 0xca:
		s, err := d.take(4)
		if err != nil {
			return nil, err
		}
		return float64(math.Float32frombits(binary.BigEndian.Uint32(s))), nil
	case 0xcb:
		s, err := d.take(8)
		if err != nil {
			return nil, err
		}
		return math.Float64frombits(binary.BigEndian.Uint64(s)), nil
	case 0xcc, 0xcd, 0xce:
		n, err := d.length(1 << (c - 0xcc))
		return int64(n), err
	case 0xcf:
		s, err := d.take(8)
		if err != nil {
			return nil, err
		}
		return U64(binary.BigEndian.Uint64(s)), nil
	case 0xd0:
		s, err := d.take(1)
		if err != nil {
			return nil, err
		}
		return int64(int8(s[0])), nil
	case 0xd1:
		s, err := d.take(2)
		if err != nil {
			return nil, err
		}
		return int64(int16(binary.BigEndian.Uint16(s))), nil
	case 0xd2:
		s, err := d.take(4)
		if err != nil {
			return nil, err
		}
		return int64(int32(binary.BigEndian.Uint32(s))), nil
	case 0xd3:
		s, err := d.take(8)
		if err != nil {
			return nil, err
		}
		return int64(binary.BigEndian.Uint64(s)), nil
	case 0xd9, 0xda, 0xdb:
		n, err := d.length(1 << (c - 0xd9))
		if err != nil {
			return nil, err
		}
		return d.str(n)
	}
	return nil, d.fail("unsupported msgpack type 0x%02x", c)
}

// arrayHeader reads the header of an array at depth depth and claims its
// elements from the budget.
func (d *decoder) arrayHeader(depth int) (int, error) {
	return d.header(depth, 0x90, 0xdc, 1, "array")
}

// mapHeader reads the header of a map at depth depth and claims its keys
// and values from the budget.
func (d *decoder) mapHeader(depth int) (int, error) {
	return d.header(depth, 0x80, 0xde, 2, "map")
}

// header reads a container's header: fix is its fix form's high nibble,
// wide its 16-bit form (the 32-bit form follows), per the values each
// element holds. It checks, before it reads the length, that the
// container's elements may nest one level deeper, and, after, that the
// payload has a byte left for each of them and for every element claimed
// before.
func (d *decoder) header(depth int, fix, wide byte, per int, what string) (int, error) {
	if depth+1 > maxDepth {
		return 0, d.fail("nested deeper than %d", maxDepth)
	}
	h, err := d.take(1)
	if err != nil {
		return 0, err
	}
	var n int
	switch c := h[0]; {
	case c&0xf0 == fix:
		n = int(c & 0x0f)
	case c == wide, c == wide+1:
		if n, err = d.length(2 << (c - wide)); err != nil {
			return 0, err
		}
	default:
		d.off--
		return 0, d.fail("msgpack type 0x%02x, want %s", c, what)
	}
	// n < 0: a 32-bit length past a 32-bit int's range.
	if n < 0 || per*n > len(d.b)-d.off || per*n > d.budget {
		return 0, d.fail("%s of %d entries in %d bytes", what, n, min(len(d.b)-d.off, d.budget))
	}
	d.budget -= per * n
	return n, nil
}

func (d *decoder) str(n int) (string, error) {
	s, err := d.take(n)
	return string(s), err
}

// arrayOf decodes the n elements of an array whose header was read.
func (d *decoder) arrayOf(n, depth int) ([]any, error) {
	out := make([]any, 0, min(n, maxPrealloc))
	for range n {
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// mapOf decodes the n entries of a map whose header was read.
func (d *decoder) mapOf(n, depth int) (map[string]any, error) {
	out := make(map[string]any, min(n, maxPrealloc))
	for range n {
		k, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		ks, ok := k.(string)
		if !ok {
			return nil, d.fail("map key %T, want a string", k)
		}
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		out[ks] = v
	}
	return out, nil
}
