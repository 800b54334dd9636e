package gpu

import (
	"errors"
	"strings"
	"testing"
)

func TestDTypeSizeAndName(t *testing.T) {
	cases := []struct {
		d    DType
		size int
		name string
	}{
		{F32, 4, "f32"}, {F16, 2, "f16"}, {BF16, 2, "bf16"}, {FP8, 1, "fp8"}, {U8, 1, "u8"},
	}
	for _, c := range cases {
		if got := c.d.Size(); got != c.size {
			t.Errorf("%v.Size() = %d, want %d", c.d, got, c.size)
		}
		if got := c.d.String(); got != c.name {
			t.Errorf("String() = %q, want %q", got, c.name)
		}
		back, err := ParseDType(strings.ToUpper(c.name))
		if err != nil || back != c.d {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", c.name, back, err, c.d)
		}
	}
	if d, err := ParseDType("bfloat16"); err != nil || d != BF16 {
		t.Errorf("ParseDType(bfloat16) = %v, %v", d, err)
	}
}

func TestDTypeInvalid(t *testing.T) {
	if _, err := ParseDType("int4"); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("ParseDType(int4) error = %v, want ErrInvalidSpec", err)
	}
	var zero DType
	if zero.Valid() || DType(99).Valid() {
		t.Error("zero or unknown DType reported valid")
	}
	if got := DType(99).String(); got != "DType(99)" {
		t.Errorf("String() = %q", got)
	}
	defer func() {
		if r := recover(); r == nil || !strings.HasPrefix(r.(string), "kvtier: ") {
			t.Errorf("Size of invalid DType: recovered %v, want a kvtier: panic", r)
		}
	}()
	_ = zero.Size()
}
