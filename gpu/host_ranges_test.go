package gpu

import (
	"errors"
	"testing"
)

func TestHostRanges(t *testing.T) {
	mem := make([]byte, 100)
	a, b := mem[10:20], mem[30:50] // two "buffers"
	var r hostRanges
	if r.contains(a) {
		t.Fatal("empty registry contains a range")
	}
	r.add(b)
	r.add(a)
	tests := []struct {
		name string
		s    []byte
		want bool
	}{
		{"first whole", mem[10:20], true},
		{"first inner", mem[12:15], true},
		{"first last byte", mem[19:20], true},
		{"second whole", mem[30:50], true},
		{"before both", mem[0:5], false},
		{"straddles first start", mem[9:12], false},
		{"past first end", mem[15:21], false},
		{"between", mem[20:30], false},
		{"spans both", mem[10:50], false},
		{"after both", mem[50:60], false},
		{"past second end", mem[45:51], false},
	}
	for _, tt := range tests {
		if got := r.contains(tt.s); got != tt.want {
			t.Errorf("%s: contains = %v, want %v", tt.name, got, tt.want)
		}
	}
	err := r.checkOps([]CopyOp{{Block: 3, Host: mem[12:14]}, {Block: 4, Host: mem[25:27]}})
	var ce *CopyError
	if !errors.Is(err, ErrNotPinned) || !errors.As(err, &ce) || ce.Index != 1 || ce.Block != 4 {
		t.Errorf("checkOps = %v, want ErrNotPinned for op 1", err)
	}
	r.remove(a)
	if r.contains(mem[12:15]) || !r.contains(mem[35:40]) {
		t.Error("remove dropped the wrong range")
	}
}
