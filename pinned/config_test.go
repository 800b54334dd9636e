package pinned

import (
	"errors"
	"testing"

	"github.com/kvtier/kvtier/policy"
)

func TestNewValidatesEachField(t *testing.T) {
	page := int64(pageSize)
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"zero slot", Config{CapacityBytes: page, SlotBytes: 0}, "SlotBytes"},
		{"negative slot", Config{CapacityBytes: page, SlotBytes: -1}, "SlotBytes"},
		{"zero capacity", Config{CapacityBytes: 0, SlotBytes: 64}, "CapacityBytes"},
		{"negative capacity", Config{CapacityBytes: -page, SlotBytes: 64}, "CapacityBytes"},
		{"less than a stride", Config{CapacityBytes: page - 1, SlotBytes: 64}, "CapacityBytes"},
		{"unknown policy", Config{CapacityBytes: page, SlotBytes: 64, Policy: 42}, "Policy"},
		{"too many slots", Config{CapacityBytes: 1 << 62, SlotBytes: 1}, "CapacityBytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.cfg)
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.field || !errors.Is(err, ErrBadConfig) || p != nil {
				t.Fatalf("New = %v, %v; want *ConfigError for %s", p, err, tt.field)
			}
		})
	}
}

func TestNewSlotCountHonoursCapacity(t *testing.T) {
	page := pageSize
	tests := []struct {
		capacity        int64
		slotBytes       int
		slots, stride   int
		defaultedPolicy policy.Kind
	}{
		{int64(4 * page), page, 4, page, policy.Adaptive},
		{int64(4*page + page - 1), page, 4, page, policy.Adaptive}, // rounded down
		{int64(4 * page), page + 1, 2, 2 * page, policy.Adaptive},  // stride rounds up to a page
		{int64(3 * page), 100, 3, page, policy.Adaptive},
	}
	for _, tt := range tests {
		cfg := Config{CapacityBytes: tt.capacity, SlotBytes: tt.slotBytes}
		p, err := New(cfg)
		if err != nil {
			t.Fatalf("New(%+v): %v", cfg, err)
		}
		st := p.Stats()
		if st.Slots != tt.slots || st.Free != tt.slots || st.SlotStride != tt.stride || st.SlotBytes != tt.slotBytes {
			t.Errorf("New(%+v): stats %+v; want %d slots of stride %d", cfg, st, tt.slots, tt.stride)
		}
		if st.BytesMapped > tt.capacity {
			t.Errorf("New(%+v) mapped %d bytes, over capacity", cfg, st.BytesMapped)
		}
		if p.pol.Kind() != tt.defaultedPolicy {
			t.Errorf("zero Policy gave %v, want %v", p.pol.Kind(), tt.defaultedPolicy)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// fakeAlloc serves pools from Go memory and records frees.
type fakeAlloc struct {
	misalign, short bool
	locked          bool
	err             error
	frees           int
}

func (f *fakeAlloc) alloc(bytes int) ([]byte, bool, func() error, error) {
	if f.err != nil {
		return nil, false, nil, f.err
	}
	buf := make([]byte, bytes+2*pageSize)
	off := pageSize - int(uintptrOf(buf)%uintptr(pageSize))
	if f.misalign {
		off++
	}
	n := bytes
	if f.short {
		n--
	}
	return buf[off : off+n], f.locked, func() error { f.frees++; return nil }, nil
}

func TestNewCustomAlloc(t *testing.T) {
	cfg := func(f *fakeAlloc) Config {
		return Config{CapacityBytes: int64(2 * pageSize), SlotBytes: pageSize, Alloc: f.alloc}
	}

	f := &fakeAlloc{locked: true}
	p, err := New(cfg(f))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Locked() || !p.Stats().Locked {
		t.Error("allocator said locked, pool says not")
	}
	if err := p.Close(); err != nil || f.frees != 1 {
		t.Fatalf("Close = %v, frees %d; want nil, 1", err, f.frees)
	}
	if err := p.Close(); !errors.Is(err, ErrClosed) || f.frees != 1 {
		t.Fatalf("second Close = %v, frees %d; want ErrClosed, 1", err, f.frees)
	}

	boom := errors.New("no pinned memory")
	if _, err := New(cfg(&fakeAlloc{err: boom})); !errors.Is(err, boom) || !errors.Is(err, ErrAlloc) {
		t.Errorf("allocator error not wrapped with ErrAlloc: %v", err)
	}
	for _, f := range []*fakeAlloc{{misalign: true}, {short: true}} {
		if p, err := New(cfg(f)); !errors.Is(err, ErrAlloc) || p != nil || f.frees != 1 {
			t.Errorf("bad memory %+v: New = %v, %v, frees %d; want error and one free", f, p, err, f.frees)
		}
	}
}

func TestNewDefaultAllocUnlocked(t *testing.T) {
	p := newPool(t, 2, 64, policy.LRU)
	if p.Locked() {
		t.Error("Lock was not asked for, pool reports locked")
	}
}

// With Lock set, failure to lock is not an error: the pool works either way.
func TestNewLockIsBestEffort(t *testing.T) {
	p, err := New(Config{CapacityBytes: int64(4 * pageSize), SlotBytes: pageSize, Lock: true})
	if err != nil {
		t.Fatalf("New with Lock: %v", err)
	}
	t.Logf("locked: %v", p.Locked())
	slot := put(t, p, 1)
	p.Bytes(slot)[0] = 1
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}
