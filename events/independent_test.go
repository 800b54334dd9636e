package events

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// The shapes an existing consumer decodes, written from vLLM's documented
// schema and decoded with an independent msgpack library: llm-d's indexer
// reads the batch and the older positional events as arrays.
type arrayBatch struct {
	_      struct{} `msgpack:",as_array"`
	TS     float64
	Events []msgpack.RawMessage
	DPRank *int
}

type arrayStored struct {
	_               struct{} `msgpack:",as_array"`
	Tag             string
	BlockHashes     []any
	ParentBlockHash any
	TokenIDs        []uint32
	BlockSize       int
	LoRAID          *int
	Medium          *string
	LoRAName        *string
}

type arrayRemoved struct {
	_           struct{} `msgpack:",as_array"`
	Tag         string
	BlockHashes []any
	Medium      *string
}

// TestIndependentDecoder: payloads in both formats decode with
// github.com/vmihailenco/msgpack into the schema's types — hashes as
// uint64, the map format's keys spelled as vLLM's fields.
func TestIndependentDecoder(t *testing.T) {
	b := Batch{TS: 12.5, DPRank: 1, Events: []Event{
		{Kind: BlockStored, Hashes: []uint64{3, 1 << 60}, Parent: 9, HasParent: true, Tokens: []int64{1, 2, 3, 4}, BlockSize: 2, Medium: MediumCPU},
		{Kind: BlockRemoved, Hashes: []uint64{3}, Medium: MediumGPU},
		{Kind: AllBlocksCleared},
	}}
	var ab arrayBatch
	if err := msgpack.Unmarshal(FormatArray.AppendBatch(nil, &b), &ab); err != nil {
		t.Fatal(err)
	}
	if ab.TS != 12.5 || ab.DPRank == nil || *ab.DPRank != 1 || len(ab.Events) != 3 {
		t.Fatalf("batch %+v", ab)
	}
	var st arrayStored
	if err := msgpack.Unmarshal(ab.Events[0], &st); err != nil {
		t.Fatal(err)
	}
	if st.Tag != "BlockStored" || len(st.BlockHashes) != 2 || st.BlockHashes[1] != uint64(1<<60) || st.BlockHashes[0] != uint64(3) ||
		st.ParentBlockHash != uint64(9) || len(st.TokenIDs) != 4 || st.BlockSize != 2 || st.LoRAID != nil || st.Medium == nil || *st.Medium != "CPU" || st.LoRAName != nil {
		t.Fatalf("stored %+v", st)
	}
	var rm arrayRemoved
	if err := msgpack.Unmarshal(ab.Events[1], &rm); err != nil || rm.Tag != "BlockRemoved" || rm.BlockHashes[0] != uint64(3) || *rm.Medium != "GPU" {
		t.Fatalf("removed %+v %v", rm, err)
	}
	var cleared []any
	if err := msgpack.Unmarshal(ab.Events[2], &cleared); err != nil || len(cleared) != 1 || cleared[0] != "AllBlocksCleared" {
		t.Fatalf("cleared %v %v", cleared, err)
	}

	var mb []any
	if err := msgpack.Unmarshal(FormatMap.AppendBatch(nil, &b), &mb); err != nil {
		t.Fatal(err)
	}
	evs := mb[1].([]any)
	stored := evs[0].(map[string]any)
	want := map[string]any{"type": "BlockStored", "parent_block_hash": uint64(9), "block_size": int8(2), "lora_id": nil, "medium": "CPU", "lora_name": nil}
	for k, v := range want {
		if got, ok := stored[k]; !ok || got != v {
			t.Errorf("map event %q = %#v (present %v), want %#v", k, got, ok, v)
		}
	}
	if hs := stored["block_hashes"].([]any); hs[0] != uint64(3) {
		t.Errorf("block_hashes %#v", hs)
	}
	if len(stored) != 8 {
		t.Errorf("BlockStored has %d keys, want vLLM's 8: %v", len(stored), stored)
	}
	if r := evs[1].(map[string]any); len(r) != 3 || r["type"] != "BlockRemoved" || r["medium"] != "GPU" {
		t.Errorf("BlockRemoved %v", r)
	}
	if c := evs[2].(map[string]any); len(c) != 1 || c["type"] != "AllBlocksCleared" {
		t.Errorf("AllBlocksCleared %v", c)
	}
}
