package kvtier

import (
	"context"
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

// TestProbeRvBLoRAStoredNamesAdapter: a block computed under a LoRA adapter
// is KV of that adapter, not of the base model. vLLM's BlockStored names
// the adapter (lora_name, lora_id) so that a router that keys blocks by
// their token ids (llm-d's indexer) keeps adapters apart; kvtier's events
// carry lora_name nil for every block, so a LoRA block is announced as if
// it were base-model KV of the same tokens.
func TestProbeRvBLoRAStoredNamesAdapter(t *testing.T) {
	m := newManager(t, Config{GPUBlocks: 16,
		Events: &EventsConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv@test@model"}})
	ctx := context.Background()
	prompt := toks(100, 2*bt)
	if _, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: prompt, LoRA: "sql-adapter"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Commit(ctx, 1, len(prompt)); err != nil {
		t.Fatal(err)
	}
	var stored int
	for _, e := range replayEvents(t, m) {
		if e.Kind != events.BlockStored {
			continue
		}
		stored++
		if e.LoRAName != "sql-adapter" {
			t.Errorf("BlockStored %x of a LoRA request: lora_name %q, want %q", e.Hashes, e.LoRAName, "sql-adapter")
		}
	}
	if stored == 0 {
		t.Fatal("no BlockStored")
	}
}
