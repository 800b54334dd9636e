package kvtier

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kvtier/kvtier/events"
)

// storedInfo is what a BlockStored said of one block.
type storedInfo struct {
	parent    uint64
	hasParent bool
	tokens    []int64
	lora      string
}

// storedBlocks splits the BlockStored events of medium into blocks.
func storedBlocks(evs []events.Event, medium events.Medium) map[uint64]storedInfo {
	out := map[uint64]storedInfo{}
	for _, e := range evs {
		if e.Kind != events.BlockStored || e.Medium != medium {
			continue
		}
		for i, h := range e.Hashes {
			s := storedInfo{parent: e.Parent, hasParent: e.HasParent, lora: e.LoRAName}
			if i > 0 {
				s.parent, s.hasParent = e.Hashes[i-1], true
			}
			if len(e.Tokens) > 0 {
				s.tokens = e.Tokens[i*e.BlockSize : (i+1)*e.BlockSize]
			}
			out[h] = s
		}
	}
	return out
}

func sameStored(a, b storedInfo) bool {
	return a.hasParent == b.hasParent && (!a.hasParent || a.parent == b.parent) && a.lora == b.lora && slices.Equal(a.tokens, b.tokens)
}

// TestReopenedDiskAnnouncesChains: a Manager restarted over its disk
// announces the disk's records (STORAGE stores, in the replay and in a
// snapshot) as the GPU announced the blocks when it computed them: each
// with its parent's hash (none for a chain's first block), its token ids
// and its adapter's name. They used to come back as roots with no token
// ids and no adapter: the disk's records kept neither.
func TestReopenedDiskAnnouncesChains(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := diskConfig(t, dir)
	cfg.Events = &EventsConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv@test@model"}
	m := newManager(t, cfg)
	base, adapter := toks(100, 4*bt), toks(500, 3*bt)
	for i, req := range []AllocRequest{{Seq: 1, Tokens: base}, {Seq: 2, Tokens: adapter, LoRA: "sql-adapter"}} {
		r, err := m.Allocate(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		wait(t, r)
		if err := commitFree(ctx, m, req.Seq); err != nil {
			t.Fatal(err)
		}
		if err := m.Flush(ctx); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	for i := range 6 { // other prompts push both chains down to the disk
		seq := uint64(10 + i)
		r, err := m.Allocate(ctx, AllocRequest{Seq: seq, Tokens: toks(10000*(i+2), 8*bt)})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, r)
		if err := commitFree(ctx, m, seq); err != nil {
			t.Fatal(err)
		}
		if err := m.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	gpu := storedBlocks(replayEvents(t, m), events.MediumGPU)
	onDisk := tiersByMedium(t, m)[events.MediumStorage]
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}

	m = newManager(t, cfg)
	evs := replayEvents(t, m)
	reopened := storedBlocks(evs, events.MediumStorage)
	if len(reopened) != len(onDisk) {
		t.Fatalf("reopened disk announced %d blocks, %d were on disk", len(reopened), len(onDisk))
	}
	check := func(what string, got map[uint64]storedInfo) {
		t.Helper()
		loras := map[string]int{}
		for _, h := range onDisk {
			g, ok := got[h]
			want := gpu[h]
			if !ok || !sameStored(g, want) {
				t.Fatalf("%s: block %x announced as %+v, the GPU announced %+v", what, h, g, want)
			}
			if len(g.tokens) != bt {
				t.Fatalf("%s: block %x has %d token ids", what, h, len(g.tokens))
			}
			loras[g.lora]++
		}
		// Both test chains went down whole, among the other prompts' blocks.
		if loras["sql-adapter"] != 3 || loras[""] < 4 {
			t.Fatalf("%s: blocks by adapter %v", what, loras)
		}
	}
	check("replay", reopened)
	// Parents on disk come before their children.
	seen := map[uint64]bool{}
	for _, e := range evs {
		if e.Kind == events.BlockStored && e.Medium == events.MediumStorage {
			if e.HasParent && reopened[e.Parent].tokens != nil && !seen[e.Parent] {
				t.Fatalf("block %x announced before its parent %x", e.Hashes[0], e.Parent)
			}
			for _, h := range e.Hashes {
				seen[h] = true
			}
		}
	}
	_, replay := m.EventEndpoints()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	snap, err := events.FetchSnapshot(sctx, replay)
	if err != nil {
		t.Fatal(err)
	}
	b, err := events.DecodeBatch(snap.Payload)
	if err != nil {
		t.Fatal(err)
	}
	check("snapshot", storedBlocks(b.Events, events.MediumStorage))
}
