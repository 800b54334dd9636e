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

// U64 names a msgpack uint64 (0xcf), the form the encoder writes block
// hashes in. DecodeBatch no longer returns it (hashes decode into uint64,
// from any integer form or bytes); it is kept for callers that name it.
type U64 uint64

// decoder reads msgpack values one at a time into the types the event
// schema wants: the batch and event decoders (decode.go) read each field
// straight into its Go type (token ids into []int64, hashes into
// []uint64) and skip what they do not know, so nothing is boxed.
//
// Nothing is allocated on a length prefix's word alone: a container claims
// its elements from a budget of the payload's bytes (every element of
// every container starts at a byte of its own, so the claims of a
// well-formed payload never add up to more than its length), and nesting
// is checked before a container's header is read. So a typed slice made
// with a list's claimed length costs at most 8 bytes for each byte of the
// payload, over all lists together.
type decoder struct {
	b      []byte
	off    int
	budget int // elements the containers still to come may claim
}

const (
	maxDepth    = 32 // containers nest at most this deep
	maxPrealloc = 16 // events a batch's slice is made with
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

// peek returns the type byte of the next value without reading it.
func (d *decoder) peek() (byte, error) {
	if d.off >= len(d.b) {
		return 0, d.fail("truncated (a value wanted, none left)")
	}
	return d.b[d.off], nil
}

func isMapHeader(c byte) bool   { return c&0xf0 == 0x80 || c == 0xde || c == 0xdf }
func isArrayHeader(c byte) bool { return c&0xf0 == 0x90 || c == 0xdc || c == 0xdd }
func isInt(c byte) bool {
	return c < 0x80 || c >= 0xe0 || c >= 0xcc && c <= 0xd3
}
func isString(c byte) bool { return c&0xe0 == 0xa0 || c >= 0xd9 && c <= 0xdb }

// typeName names the msgpack type whose first byte is c, for errors.
func typeName(c byte) string {
	switch {
	case c < 0x80, c >= 0xe0, c >= 0xcc && c <= 0xce, c >= 0xd0 && c <= 0xd3:
		return "an int"
	case c == 0xcf:
		return "a uint64"
	case isMapHeader(c):
		return "a map"
	case isArrayHeader(c):
		return "an array"
	case isString(c):
		return "a string"
	case c == 0xc0:
		return "nil"
	case c == 0xc2, c == 0xc3:
		return "a bool"
	case c >= 0xc4 && c <= 0xc6:
		return "bin"
	case c == 0xca, c == 0xcb:
		return "a float"
	}
	return fmt.Sprintf("msgpack type 0x%02x", c)
}

// isNil reads a nil if one is next.
func (d *decoder) isNil() bool {
	if d.off < len(d.b) && d.b[d.off] == 0xc0 {
		d.off++
		return true
	}
	return false
}

// str reads a string; its bytes are the payload's (copy what is kept).
// what names the value for the error when it is not a string.
func (d *decoder) str(what string) ([]byte, error) {
	c, err := d.peek()
	if err != nil {
		return nil, err
	}
	if !isString(c) {
		return nil, d.fail("%s is %s, want a string", what, typeName(c))
	}
	d.off++
	n := int(c & 0x1f)
	if c >= 0xd9 {
		if n, err = d.length(1 << (c - 0xd9)); err != nil {
			return nil, err
		}
	}
	return d.take(n)
}

// integer reads an int in any of msgpack's forms; u64 reports the uint64
// form (0xcf), whose value is returned as its bits.
func (d *decoder) integer(what string) (v int64, u64 bool, err error) {
	c, err := d.peek()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c < 0x80:
		d.off++
		return int64(c), false, nil
	case c >= 0xe0:
		d.off++
		return int64(int8(c)), false, nil
	case c >= 0xcc && c <= 0xcf:
		d.off++
		s, err := d.take(1 << (c - 0xcc))
		if err != nil {
			return 0, false, err
		}
		return int64(beUint(s)), c == 0xcf, nil
	case c >= 0xd0 && c <= 0xd3:
		d.off++
		s, err := d.take(1 << (c - 0xd0))
		if err != nil {
			return 0, false, err
		}
		shift := 64 - 8*len(s) // sign-extend
		return int64(beUint(s)<<shift) >> shift, false, nil
	}
	return 0, false, d.fail("%s is %s, want an int", what, typeName(c))
}

// beUint is s, 1 to 8 big-endian bytes, as an unsigned number.
func beUint(s []byte) uint64 {
	var v uint64
	for _, x := range s {
		v = v<<8 | uint64(x)
	}
	return v
}

// blockHash reads a block hash in any form vLLM writes one
// (ExternalBlockHash is bytes | int, and msgspec writes an int in its
// shortest form): an unsigned int is its value, a negative one (older vLLM
// hashed with Python's hash(), a signed 64-bit int) its two's-complement
// bits, and bytes, at least 8 of them, their last 8 read big-endian — the
// int vLLM itself derives from a bytes hash when it sends ints. Anything
// else (a float, a string, fewer than 8 bytes) is an error.
func (d *decoder) blockHash(what string) (uint64, error) {
	c, err := d.peek()
	if err != nil {
		return 0, err
	}
	if c >= 0xc4 && c <= 0xc6 { // bin 8/16/32
		d.off++
		n, err := d.length(1 << (c - 0xc4))
		if err != nil {
			return 0, err
		}
		s, err := d.take(n)
		if err != nil {
			return 0, err
		}
		if n < 8 {
			return 0, d.fail("%s is %d bytes, want at least 8", what, n)
		}
		return binary.BigEndian.Uint64(s[n-8:]), nil
	}
	if !isInt(c) {
		return 0, d.fail("%s is %s, want an int or bytes", what, typeName(c))
	}
	v, _, err := d.integer(what)
	return uint64(v), err
}

// float reads a float32 or float64 as a float64.
func (d *decoder) float(what string) (float64, error) {
	c, err := d.peek()
	if err != nil {
		return 0, err
	}
	switch c {
	case 0xca:
		s, err := d.take(5)
		if err != nil {
			return 0, err
		}
		return float64(math.Float32frombits(binary.BigEndian.Uint32(s[1:]))), nil
	case 0xcb:
		s, err := d.take(9)
		if err != nil {
			return 0, err
		}
		return math.Float64frombits(binary.BigEndian.Uint64(s[1:])), nil
	}
	return 0, d.fail("%s is %s, want a float", what, typeName(c))
}

// skip reads one value at nesting depth depth (the payload's outermost
// value is at 0) and keeps nothing of it.
func (d *decoder) skip(depth int) error {
	c, err := d.peek()
	if err != nil {
		return err
	}
	var n int
	switch {
	case isMapHeader(c):
		if n, err = d.mapHeader(depth); err != nil {
			return err
		}
		n *= 2
	case isArrayHeader(c):
		if n, err = d.arrayHeader(depth); err != nil {
			return err
		}
	default:
		return d.skipScalar(c)
	}
	for range n {
		if err := d.skip(depth + 1); err != nil {
			return err
		}
	}
	return nil
}

// skipScalar reads the value, not a container, whose first byte is c:
// extension types too (msgspec writes a datetime as the timestamp
// extension), so a field vLLM adds of any type is skipped.
func (d *decoder) skipScalar(c byte) error {
	var n int // bytes after c
	var err error
	switch {
	case c < 0x80, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
	case c&0xe0 == 0xa0:
		n = int(c & 0x1f)
	case c >= 0xc4 && c <= 0xc6, c >= 0xd9 && c <= 0xdb:
		first := byte(0xc4)
		if c >= 0xd9 {
			first = 0xd9
		}
		d.off++
		if n, err = d.length(1 << (c - first)); err != nil {
			return err
		}
		_, err = d.take(n)
		return err
	case c == 0xca:
		n = 4
	case c == 0xcb:
		n = 8
	case c >= 0xcc && c <= 0xcf:
		n = 1 << (c - 0xcc)
	case c >= 0xd0 && c <= 0xd3:
		n = 1 << (c - 0xd0)
	case c >= 0xd4 && c <= 0xd8: // fixext 1..16: a type byte, then the data
		n = 1 + 1<<(c-0xd4)
	case c >= 0xc7 && c <= 0xc9: // ext 8/16/32: a length, a type byte, the data
		d.off++
		if n, err = d.length(1 << (c - 0xc7)); err != nil {
			return err
		}
		_, err = d.take(1 + n)
		return err
	default:
		return d.fail("unsupported msgpack type 0x%02x", c)
	}
	_, err = d.take(1 + n)
	return err
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
