package policy

import (
	"errors"
	"testing"
)

func TestKindStringParseRoundTrip(t *testing.T) {
	for _, k := range []Kind{LRU, FIFO, S3FIFO, ARC, Adaptive} {
		got, err := ParseKind(k.String())
		if err != nil || got != k {
			t.Errorf("ParseKind(%q) = %v, %v; want %v", k.String(), got, err, k)
		}
	}
	for s, want := range map[string]Kind{"LRU": LRU, " Fifo ": FIFO, "S3-FIFO": S3FIFO, " ARC": ARC, "Adaptive": Adaptive} {
		if got, err := ParseKind(s); err != nil || got != want {
			t.Errorf("ParseKind(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
}

func TestParseKindUnknown(t *testing.T) {
	for _, s := range []string{"", "lfu", "clock"} {
		if _, err := ParseKind(s); !errors.Is(err, ErrUnknownKind) {
			t.Errorf("ParseKind(%q) error = %v, want ErrUnknownKind", s, err)
		}
	}
	if got := Kind(0).String(); got != "Kind(0)" {
		t.Errorf("Kind(0).String() = %q", got)
	}
}

func TestNewValidates(t *testing.T) {
	tests := []struct {
		kind     Kind
		capacity int
		want     error
	}{
		{0, 10, ErrUnknownKind},
		{Adaptive + 1, 10, ErrUnknownKind},
		{LRU, 0, ErrBadCapacity},
		{S3FIFO, -1, ErrBadCapacity},
	}
	for _, tt := range tests {
		p, err := New(tt.kind, tt.capacity)
		if !errors.Is(err, tt.want) || p != nil {
			t.Errorf("New(%v, %d) = %v, %v; want nil, %v", tt.kind, tt.capacity, p, err, tt.want)
		}
	}
	for _, k := range []Kind{LRU, FIFO, S3FIFO, ARC, Adaptive} {
		if p := mustNew(t, k, 1); p.Kind() != k || p.Len() != 0 {
			t.Errorf("New(%v, 1): Kind %v Len %d", k, p.Kind(), p.Len())
		}
	}
}
