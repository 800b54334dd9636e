package kvtier

import (
	"context"
	"errors"
	"testing"
)

// TestNilContext: every call that takes a context refuses a nil one with
// ErrNilContext, changes nothing, and panics nowhere.
func TestNilContext(t *testing.T) {
	m := newManager(t, Config{GPUBlocks: 8, PinnedBytes: 1 << 20})
	var nilCtx context.Context // a caller's bug, not a panic
	a := toks(1, 2*bt)
	calls := map[string]func() error{
		"Allocate": func() error { _, err := m.Allocate(nilCtx, AllocRequest{Seq: 1, Tokens: a}); return err },
		"AllocateBatch": func() error {
			_, err := m.AllocateBatch(nilCtx, []AllocRequest{{Seq: 1, Tokens: a}})
			return err
		},
		"Step": func() error {
			_, err := m.Step(nilCtx, StepRequest{Allocate: []AllocRequest{{Seq: 1, Tokens: a}}})
			return err
		},
		"Commit":      func() error { return m.Commit(nilCtx, 1, AllTokens) },
		"CommitBatch": func() error { _, err := m.CommitBatch(nilCtx, []CommitItem{{Seq: 1}}); return err },
		"Append":      func() error { _, err := m.Append(nilCtx, 1, []int64{1}); return err },
		"AppendBatch": func() error { _, err := m.AppendBatch(nilCtx, []AppendItem{{Seq: 1, Tokens: []int64{1}}}); return err },
		"Free":        func() error { return m.Free(nilCtx, 1) },
		"FreeBatch":   func() error { _, err := m.FreeBatch(nilCtx, []uint64{1}); return err },
		"Swap":        func() error { _, err := m.Swap(nilCtx, []uint64{1}); return err },
		"Exists":      func() error { _, err := m.Exists(nilCtx, a, ""); return err },
		"Lookup":      func() error { _, err := m.Lookup(nilCtx, LookupRequest{Tokens: a}); return err },
		"Delete":      func() error { _, err := m.Delete(nilCtx, a, ""); return err },
		"Prefetch":    func() error { _, err := m.Prefetch(nilCtx, a, ""); return err },
		"Flush":       func() error { return m.Flush(nilCtx) },
		"Stats":       func() error { _, err := m.Stats(nilCtx); return err },
		"Close":       func() error { return m.Close(nilCtx) },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ErrNilContext) {
			t.Errorf("%s(nil ctx) = %v, want ErrNilContext", name, err)
		}
	}
	// Nothing took effect: the sequence id is free and the Manager open.
	ctx := context.Background()
	r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
	if err != nil {
		t.Fatalf("Allocate after the refused calls: %v", err)
	}
	if r.GPUTokens != 0 {
		t.Fatalf("a refused call cached blocks: %+v", r)
	}
}

// TestDiskSettingsValidatedWithoutDiskDir: every disk field is checked even
// when no disk directory enables the tier.
func TestDiskSettingsValidatedWithoutDiskDir(t *testing.T) {
	for field, c := range map[string]Config{
		"DiskWriteQuota": {GPUBlocks: 4, DiskWriteQuota: -1},
		"DiskPolicy":     {GPUBlocks: 4, DiskPolicy: 99},
		"DiskIngestion":  {GPUBlocks: 4, DiskIngestion: 99},
		"Layout":         {GPUBlocks: 4, Layout: 99},
	} {
		var ce *ConfigError
		if _, err := New(c); !errors.As(err, &ce) || ce.Field != field || !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: %v, want a ConfigError naming %s", c, err, field)
		}
	}
}
