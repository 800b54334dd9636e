package kvtier

import (
	"context"
	"maps"
	"os"
	"testing"
	"time"

	"github.com/kvtier/kvtier/events"
)

// replayEvents returns every event published so far, in order, read back
// through the replay socket after a barrier.
func replayEvents(t *testing.T, m *Manager) []events.Event {
	t.Helper()
	barrier(t, m)
	_, rep := m.EventEndpoints()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fs, err := events.Replay(ctx, rep, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []events.Event
	for _, f := range fs {
		b, err := events.DecodeBatch(f.Payload)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b.Events...)
	}
	return out
}

// TestLoRAStoredNamesAdapter: a block computed under a LoRA adapter is KV
// of that adapter, not of the base model. vLLM's BlockStored names the
// adapter (lora_name) so that a router that keys blocks by their token ids
// (llm-d's indexer) keeps adapters apart, and so do kvtier's events: the
// adapter's blocks name it, the base model's blocks of the same tokens
// name none, in separate events. (Every block's lora_name was nil, review
// of 2026-11-27: a LoRA block was announced as base-model KV.)
func TestLoRAStoredNamesAdapter(t *testing.T) {
	m := newManager(t, Config{GPUBlocks: 16, PinnedBytes: 16 * int64(os.Getpagesize()), Ingestion: IngestAll,
		Events: &EventsConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv@test@model"}})
	ctx := context.Background()
	prompt := toks(100, 2*bt)
	if _, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: prompt, LoRA: "sql-adapter"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Commit(ctx, 1, len(prompt)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Allocate(ctx, AllocRequest{Seq: 2, Tokens: prompt}); err != nil { // the base model, same tokens
		t.Fatal(err)
	}
	if err := m.Commit(ctx, 2, len(prompt)); err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(ctx); err != nil { // the copies in pinned memory are announced too
		t.Fatal(err)
	}
	blocks := map[string]int{}
	for _, e := range replayEvents(t, m) {
		if e.Kind == events.BlockStored {
			blocks[string(e.Medium)+" "+e.LoRAName] += len(e.Hashes)
		}
	}
	want := map[string]int{"GPU sql-adapter": 2, "GPU ": 2, "CPU sql-adapter": 2, "CPU ": 2}
	if !maps.Equal(blocks, want) {
		t.Fatalf("blocks stored by medium and lora_name %v, want %v", blocks, want)
	}
}
