package gpu

import (
	"fmt"
	"strings"
)

// DType is the element type of a KV cache tensor. The zero value is not a
// valid type, so a forgotten field is caught by validation.
type DType int

const (
	F32  DType = iota + 1 // 32-bit IEEE float
	F16                   // 16-bit IEEE float
	BF16                  // bfloat16
	FP8                   // 8-bit float (E4M3 or E5M2; the layout does not care)
	U8                    // unsigned byte
)

// Size returns the size of one element in bytes. It panics for an invalid
// DType: sizes are asked for only after validation.
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case F16, BF16:
		return 2
	case FP8, U8:
		return 1
	}
	panic(fmt.Sprintf("kvtier: invalid DType %d", int(d)))
}

// Valid reports whether d is one of the defined element types.
func (d DType) Valid() bool { return d >= F32 && d <= U8 }

// String returns the lower-case name used by ParseDType ("bf16", ...).
func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case BF16:
		return "bf16"
	case FP8:
		return "fp8"
	case U8:
		return "u8"
	}
	return fmt.Sprintf("DType(%d)", int(d))
}

// ParseDType parses a name as written by String, case-insensitively. It
// also accepts the common long spellings "float32", "float16" and
// "bfloat16".
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "f32", "float32", "fp32":
		return F32, nil
	case "f16", "float16", "fp16", "half":
		return F16, nil
	case "bf16", "bfloat16":
		return BF16, nil
	case "fp8", "f8", "float8":
		return FP8, nil
	case "u8", "uint8":
		return U8, nil
	}
	return 0, fmt.Errorf("%w: unknown dtype %q", ErrInvalidSpec, s)
}
