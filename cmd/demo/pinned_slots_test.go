package main

import (
	"context"
	"io"
	"testing"

	"github.com/kvtier/kvtier"
)

// TestPinnedBlocksBelowAPage: the pinned tier holds -pinned-blocks blocks
// when a block is smaller than a page. Its slots are page aligned, and the
// demo gave it -pinned-blocks x the block's bytes: at -block-tokens 16 (1 KiB
// blocks) a quarter of the blocks, and GPU + pinned served 1.0% of the
// sample's prompt tokens from pinned memory where 512-token blocks serve 5.3%.
func TestPinnedBlocksBelowAPage(t *testing.T) {
	o, err := parseFlags([]string{"-block-tokens", "16", "-gpu-blocks", "64", "-pinned-blocks", "1000"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := managerConfig(o, withPinned, "")
	if err != nil {
		t.Fatal(err)
	}
	m, err := kvtier.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer func() {
		if err := m.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Tier(kvtier.Pinned).Blocks; got != 1000 {
		t.Fatalf("pinned tier of %d blocks, want -pinned-blocks 1000", got)
	}
}
