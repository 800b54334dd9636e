package events

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/messages"
)

// str is a fixstr, written out by hand.
func str(s string) string {
	return hex.EncodeToString([]byte{0xa0 | byte(len(s))}) + hex.EncodeToString([]byte(s))
}

// TestWireBytes pins the encoding byte for byte, against msgpack written out
// by hand from vLLM's schema: the batch [ts, events, dp_rank], a map event
// with "type" first and the fields in vLLM's order, hashes as 0xcf uint64
// however small, token ids in their shortest form, nil for the absent.
func TestWireBytes(t *testing.T) {
	ts := 1.5 // 0x3ff8000000000000
	b := Batch{TS: ts, DPRank: 2, Events: []Event{
		{Kind: BlockStored, Hashes: []uint64{1}, Tokens: []int64{1, 200}, BlockSize: 2, Medium: MediumGPU},
		{Kind: BlockRemoved, Hashes: []uint64{0xfedcba9876543210}, Medium: MediumCPU},
		{Kind: AllBlocksCleared},
	}}
	head := "93" + "cb3ff8000000000000" + "93"
	storedMap := "88" + str("type") + str("BlockStored") + str("block_hashes") + "91" + "cf0000000000000001" +
		str("parent_block_hash") + "c0" + str("token_ids") + "92" + "01" + "ccc8" + str("block_size") + "02" +
		str("lora_id") + "c0" + str("medium") + str("GPU") + str("lora_name") + "c0"
	removedMap := "83" + str("type") + str("BlockRemoved") + str("block_hashes") + "91" + "cffedcba9876543210" + str("medium") + str("CPU")
	clearedMap := "81" + str("type") + str("AllBlocksCleared")
	want := head + storedMap + removedMap + clearedMap + "02"
	if got := hex.EncodeToString(FormatMap.AppendBatch(nil, &b)); got != want {
		t.Fatalf("map format:\n got %s\nwant %s", got, want)
	}
	storedArr := "98" + str("BlockStored") + "91" + "cf0000000000000001" + "c0" + "92" + "01" + "ccc8" + "02" + "c0" + str("GPU") + "c0"
	removedArr := "93" + str("BlockRemoved") + "91" + "cffedcba9876543210" + str("CPU")
	clearedArr := "91" + str("AllBlocksCleared")
	want = head + storedArr + removedArr + clearedArr + "02"
	if got := hex.EncodeToString(FormatArray.AppendBatch(nil, &b)); got != want {
		t.Fatalf("array format:\n got %s\nwant %s", got, want)
	}
}

// TestGroupWireBytes: a hybrid model's events carry group_idx (and a
// BlockStored its group's spec) as vLLM writes them: by name in the map
// format, and in the array format at their positions after extra_keys,
// which is nil; events of group 0 with no spec leave them out, as vLLM's
// omit_defaults does.
func TestGroupWireBytes(t *testing.T) {
	b := Batch{TS: 1.5, Events: []Event{
		{Kind: BlockStored, Hashes: []uint64{1}, Tokens: []int64{}, BlockSize: 2, Medium: MediumGPU, Group: 1, SpecKind: "sliding_window", SlidingWindow: 128},
		{Kind: BlockRemoved, Hashes: []uint64{1}, Medium: MediumGPU, Group: 1},
	}}
	head := "93" + "cb3ff8000000000000" + "92"
	common := "91" + "cf0000000000000001" + "c0" + "90" + "02" + "c0" + str("GPU") + "c0"
	storedArr := "9c" + str("BlockStored") + common + "c0" + "01" + str("sliding_window") + "cc80"
	removedArr := "94" + str("BlockRemoved") + "91" + "cf0000000000000001" + str("GPU") + "01"
	if got, want := hex.EncodeToString(FormatArray.AppendBatch(nil, &b)), head+storedArr+removedArr+"00"; got != want {
		t.Fatalf("array format:\n got %s\nwant %s", got, want)
	}
	storedMap := "8b" + str("type") + str("BlockStored") + str("block_hashes") + "91" + "cf0000000000000001" +
		str("parent_block_hash") + "c0" + str("token_ids") + "90" + str("block_size") + "02" +
		str("lora_id") + "c0" + str("medium") + str("GPU") + str("lora_name") + "c0" +
		str("group_idx") + "01" + str("kv_cache_spec_kind") + str("sliding_window") + str("kv_cache_spec_sliding_window") + "cc80"
	removedMap := "84" + str("type") + str("BlockRemoved") + str("block_hashes") + "91" + "cf0000000000000001" +
		str("medium") + str("GPU") + str("group_idx") + "01"
	if got, want := hex.EncodeToString(FormatMap.AppendBatch(nil, &b)), head+storedMap+removedMap+"00"; got != want {
		t.Fatalf("map format:\n got %s\nwant %s", got, want)
	}
	for name, h := range map[string]string{
		"negative group":   "94" + str("BlockRemoved") + "91" + "01" + "c0" + "ff",
		"group as string":  "94" + str("BlockRemoved") + "91" + "01" + "c0" + str("1"),
		"window as a uint": "9c" + str("BlockStored") + common + "c0" + "01" + "c0" + "cfffffffffffffffff",
	} {
		p, _ := hex.DecodeString("93" + "cb3ff8000000000000" + "91" + h + "00")
		if _, err := DecodeBatch(p); !errors.Is(err, ErrDecode) {
			t.Errorf("%s: err %v, want ErrDecode", name, err)
		}
	}
}

// TestViewKeepsGroupsApart: in a hybrid model each KV cache group stores
// and removes the same chain's hashes on its own (vLLM sends group_idx);
// a sliding-window group dropping a block it no longer needs does not hide
// the full-attention group's copy, and AllBlocksCleared clears every group.
func TestViewKeepsGroupsApart(t *testing.T) {
	v := NewView()
	apply := func(seq uint64, evs ...Event) {
		t.Helper()
		if err := v.Apply(seq, FormatMap.AppendBatch(nil, &Batch{TS: float64(seq), Events: evs})); err != nil {
			t.Fatal(err)
		}
	}
	stored := func(g int, kind string, hs ...uint64) Event {
		return Event{Kind: BlockStored, Hashes: hs, Tokens: []int64{}, BlockSize: 16, Medium: MediumGPU, Group: g, SpecKind: kind}
	}
	apply(0, stored(0, "full_attention", 1, 2, 3), stored(1, "sliding_window", 1, 2, 3))
	apply(1, Event{Kind: BlockRemoved, Hashes: []uint64{1, 2}, Medium: MediumGPU, Group: 1})
	if got := v.Residency()[MediumGPU]; !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("after the sliding-window group dropped 1 and 2 the GPU holds %v, want [1 2 3]", got)
	}
	if got := v.GroupResidency(1)[MediumGPU]; !slices.Equal(got, []uint64{3}) {
		t.Fatalf("group 1 holds %v, want [3]", got)
	}
	if got := v.GroupResidency(0)[MediumGPU]; !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("group 0 holds %v, want [1 2 3]", got)
	}
	apply(2, Event{Kind: BlockRemoved, Hashes: []uint64{1, 2, 3}, Medium: MediumGPU})
	if got := v.Residency()[MediumGPU]; !slices.Equal(got, []uint64{3}) {
		t.Fatalf("after group 0 removed all three the GPU holds %v, want [3]", got)
	}
	if got := v.GroupResidency(0); len(got) != 0 {
		t.Fatalf("group 0 holds %v, want nothing", got)
	}
	apply(3, Event{Kind: AllBlocksCleared})
	if got := v.Residency(); len(got) != 0 {
		t.Fatalf("after AllBlocksCleared the view holds %v", got)
	}
}

func TestRoundTripBothFormats(t *testing.T) {
	toks := make([]int64, 32)
	for i := range toks {
		toks[i] = int64(i * 4099)
	}
	b := Batch{TS: 1700000000.25, DPRank: 0, Events: []Event{
		{Kind: BlockStored, Hashes: []uint64{7, 1 << 63}, Parent: 3, HasParent: true, Tokens: append(toks, 1<<40), BlockSize: 16, LoRAName: "sql-adapter", Medium: MediumStorage},
		{Kind: BlockRemoved, Hashes: []uint64{9}, Medium: MediumRemote},
		{Kind: BlockStored, Hashes: []uint64{11}, Tokens: []int64{}, BlockSize: 16, Medium: MediumGPU, Group: 1, SpecKind: "sliding_window", SlidingWindow: 4096},
		{Kind: BlockStored, Hashes: []uint64{12}, Tokens: []int64{}, BlockSize: 16, Medium: MediumGPU, SpecKind: "full_attention"},
		{Kind: BlockRemoved, Hashes: []uint64{11}, Medium: MediumGPU, Group: 1},
		{Kind: AllBlocksCleared},
	}}
	for _, f := range []Format{FormatMap, FormatArray} {
		got, err := DecodeBatch(f.AppendBatch(nil, &b))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !reflect.DeepEqual(got, b) {
			t.Fatalf("%s: decoded %+v, want %+v", f, got, b)
		}
	}
}

// TestDecodeIsStrict: a hash that is neither an int nor 8+ bytes, a
// truncated payload and an unknown tag are errors, never a silent zero.
func TestDecodeIsStrict(t *testing.T) {
	good := FormatMap.AppendBatch(nil, &Batch{Events: []Event{{Kind: BlockRemoved, Hashes: []uint64{5}, Medium: MediumGPU}}})
	hash5 := []byte{0xcf, 0, 0, 0, 0, 0, 0, 0, 5}
	floatHash := bytes.Replace(good, hash5, []byte{0xcb, 0x40, 0x14, 0, 0, 0, 0, 0, 0}, 1)
	shortBytes := bytes.Replace(good, hash5, []byte{0xc4, 2, 0, 5}, 1)
	if len(shortBytes) == len(good) {
		t.Fatal("test setup: hash bytes not found")
	}
	unknown := bytes.Replace(good, []byte("BlockRemoved"), []byte("BlockRemovee"), 1)
	for name, p := range map[string][]byte{"hash as float": floatHash, "hash of 2 bytes": shortBytes, "truncated": good[:len(good)-3], "unknown tag": unknown, "trailing": append(slices.Clone(good), 0xc0)} {
		if _, err := DecodeBatch(p); !errors.Is(err, ErrDecode) {
			t.Errorf("%s: err %v, want ErrDecode", name, err)
		}
	}
}

// TestDecodeHashForms: vLLM's ExternalBlockHash is bytes | int and msgspec
// writes an int in its shortest form, so a hash below 2^32 arrives as a
// fixint or uint8..32, an older vLLM's signed hash() as a negative int, and
// a bytes hash as bin. Each decodes to the uint64 vLLM means: the value,
// the two's-complement bits, or the last 8 bytes big-endian.
func TestDecodeHashForms(t *testing.T) {
	good := FormatMap.AppendBatch(nil, &Batch{Events: []Event{{Kind: BlockRemoved, Hashes: []uint64{5}, Medium: MediumGPU}}})
	hash5 := []byte{0xcf, 0, 0, 0, 0, 0, 0, 0, 5}
	digest := append(bytes.Repeat([]byte{0xee}, 24), 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0)
	for _, c := range []struct {
		name string
		form []byte
		want uint64
	}{
		{"fixint", []byte{0x05}, 5},
		{"uint8", []byte{0xcc, 0xc8}, 200},
		{"uint16", []byte{0xcd, 0x12, 0x34}, 0x1234},
		{"uint32", []byte{0xce, 0x12, 0x34, 0x56, 0x78}, 0x12345678},
		{"negative fixint", []byte{0xff}, math.MaxUint64},
		{"int64", []byte{0xd3, 0x80, 0, 0, 0, 0, 0, 0, 1}, 1<<63 + 1},
		{"int8", []byte{0xd0, 0xfe}, math.MaxUint64 - 1},
		{"8 bytes", []byte{0xc4, 8, 0, 0, 0, 0, 0, 0, 0, 9}, 9},
		{"sha256 bytes", append([]byte{0xc4, 32}, digest...), 0x123456789abcdef0},
	} {
		p := bytes.Replace(good, hash5, c.form, 1)
		b, err := DecodeBatch(p)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := b.Events[0].Hashes; len(got) != 1 || got[0] != c.want {
			t.Errorf("%s: hashes %#x, want [%#x]", c.name, got, c.want)
		}
	}
}

func FuzzDecodeBatch(f *testing.F) {
	f.Add(FormatMap.AppendBatch(nil, &Batch{Events: []Event{{Kind: BlockStored, Hashes: []uint64{1}, Tokens: []int64{1}, BlockSize: 1}}}))
	f.Add(FormatArray.AppendBatch(nil, &Batch{Events: []Event{{Kind: AllBlocksCleared}}}))
	mapBatch, _ := hex.DecodeString("83" + str("ts") + "cb3ff8000000000000" + str("events") + "91" + "81" + str("type") + str("AllBlocksCleared") + str("data_parallel_rank") + "01")
	f.Add(mapBatch)
	f.Fuzz(func(t *testing.T, p []byte) {
		b, err := DecodeBatch(p)
		if err != nil {
			return
		}
		// What decodes re-encodes and decodes to the same batch.
		for _, f := range []Format{FormatMap, FormatArray} {
			again, err := DecodeBatch(f.AppendBatch(nil, &b))
			if err != nil || !reflect.DeepEqual(again.Events, b.Events) && len(b.Events) > 0 {
				t.Fatalf("%s: %v: %+v vs %+v", f, err, again, b)
			}
		}
	})
}

func change(stored bool, h uint64, parent uint64, hasParent bool, toks ...int64) messages.ResidencyChange {
	return messages.ResidencyChange{Stored: stored, Hash: h, Parent: parent, HasParent: hasParent, Tokens: toks}
}

// TestPublisherBatches: a chain's stores share one BlockStored with the
// first block's parent; a store the medium holds already and a removal of
// what it does not hold publish nothing; lower tiers' stores carry the
// tokens and parent the GPU told.
func TestPublisherBatches(t *testing.T) {
	now := time.Unix(100, 0)
	p := NewPublisher(Config{BlockSize: 2, BufferSteps: 3})
	if f := p.Start(now); f.Seq != 0 {
		t.Fatalf("start seq %d", f.Seq)
	}
	f, ok := p.Apply(&messages.Residency{Tier: messages.GPU, Changes: []messages.ResidencyChange{
		change(true, 10, 0, false, 1, 2), change(true, 11, 10, true, 3, 4), change(true, 20, 0, false, 9, 9)}}, now)
	if !ok || f.Seq != 1 {
		t.Fatalf("apply: %v seq %d", ok, f.Seq)
	}
	b, err := DecodeBatch(f.Payload)
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{
		{Kind: BlockStored, Hashes: []uint64{10, 11}, Tokens: []int64{1, 2, 3, 4}, BlockSize: 2, Medium: MediumGPU},
		{Kind: BlockStored, Hashes: []uint64{20}, Tokens: []int64{9, 9}, BlockSize: 2, Medium: MediumGPU},
	}
	if !reflect.DeepEqual(b.Events, want) || b.TS != 100 {
		t.Fatalf("events %+v ts %v, want %+v", b.Events, b.TS, want)
	}
	if _, ok := p.Apply(&messages.Residency{Tier: messages.GPU, Changes: []messages.ResidencyChange{change(true, 10, 0, false, 1, 2), change(false, 99, 0, false)}}, now); ok {
		t.Fatal("a repeated store and a removal of nothing published a batch")
	}
	// Down a tier: the pinned tier's store knows only the hash.
	f, _ = p.Apply(&messages.Residency{Tier: messages.Pinned, Changes: []messages.ResidencyChange{change(true, 11, 0, false)}}, now)
	b, _ = DecodeBatch(f.Payload)
	if e := b.Events[0]; e.Medium != MediumCPU || !e.HasParent || e.Parent != 10 || !slices.Equal(e.Tokens, []int64{3, 4}) {
		t.Fatalf("CPU store %+v", e)
	}
	f, _ = p.Apply(&messages.Residency{Tier: messages.GPU, Changes: []messages.ResidencyChange{change(false, 11, 0, false), change(false, 10, 0, false)}}, now)
	b, _ = DecodeBatch(f.Payload)
	if len(b.Events) != 1 || !slices.Equal(b.Events[0].Hashes, []uint64{11, 10}) || b.Events[0].Kind != BlockRemoved {
		t.Fatalf("removals %+v", b.Events)
	}
	if got := p.Residency(); !reflect.DeepEqual(got, map[Medium][]uint64{MediumGPU: {20}, MediumCPU: {11}}) {
		t.Fatalf("residency %v", got)
	}
	// The ring keeps the last 3 batches (seqs 2..4).
	var seqs []uint64
	for _, f := range p.Replay(0) {
		seqs = append(seqs, f.Seq)
	}
	if !slices.Equal(seqs, []uint64{1, 2, 3}) {
		t.Fatalf("replay seqs %v", seqs)
	}
	if r := p.Replay(3); len(r) != 1 || r[0].Seq != 3 {
		t.Fatalf("replay from 3: %v", r)
	}
}

// TestViewSnapshotResync: a view that missed batches sees the gap, resets
// from a snapshot and, with the batches after it, holds the publisher's
// residency.
func TestViewSnapshotResync(t *testing.T) {
	now := time.Unix(1, 0)
	p := NewPublisher(Config{BlockSize: 1})
	v := NewView()
	apply := func(f Frame, ok bool) error {
		if !ok {
			return nil
		}
		return v.Apply(f.Seq, f.Payload)
	}
	if err := apply(p.Start(now), true); err != nil {
		t.Fatal(err)
	}
	for i := range uint64(50) {
		f, ok := p.Apply(&messages.Residency{Tier: messages.GPU, Changes: []messages.ResidencyChange{change(true, i, 0, false, int64(i))}}, now)
		if i%10 == 3 {
			continue // dropped
		}
		if err := apply(f, ok); err != nil && !errors.Is(err, ErrGap) {
			t.Fatal(err)
		} else if err != nil {
			break
		}
		if i%7 == 0 {
			f, ok = p.Apply(&messages.Residency{Tier: messages.Disk, Changes: []messages.ResidencyChange{change(true, i, 0, false)}}, now)
			if err := apply(f, ok); err != nil {
				t.Fatal(err)
			}
		}
	}
	if reflect.DeepEqual(v.Residency(), p.Residency()) {
		t.Fatal("test setup: the view missed nothing")
	}
	snap := p.Snapshot(now)
	later, ok := p.Apply(&messages.Residency{Tier: messages.GPU, Changes: []messages.ResidencyChange{change(false, 5, 0, false), change(true, 500, 4, true, 1)}}, now)
	if !ok {
		t.Fatal("nothing published")
	}
	if err := v.Reset(snap.Seq, snap.Payload); err != nil {
		t.Fatal(err)
	}
	if err := v.Apply(later.Seq, later.Payload); err != nil {
		t.Fatal(err)
	}
	if got, want := v.Residency(), p.Residency(); !reflect.DeepEqual(got, want) {
		t.Fatalf("view after resync %v\npublisher %v", got, want)
	}
	if err := v.Apply(later.Seq+2, later.Payload); !errors.Is(err, ErrGap) {
		t.Fatalf("a skipped sequence number: %v, want ErrGap", err)
	}
}

func TestParseFormat(t *testing.T) {
	for s, want := range map[string]Format{"": FormatMap, "map": FormatMap, "array": FormatArray} {
		if f, err := ParseFormat(s); err != nil || f != want {
			t.Errorf("%q: %v %v", s, f, err)
		}
	}
	if _, err := ParseFormat("positional"); err == nil || !strings.Contains(err.Error(), "unknown format") {
		t.Errorf("bad format: %v", err)
	}
}

// TestViewFollowsRestartedPublisher: a publisher that restarted numbers its
// batches from 0 again and opens with AllBlocksCleared; a view that followed
// the old run follows the new one instead of skipping it, and a replay of
// the same run from 0 leaves the view as it was.
func TestViewFollowsRestartedPublisher(t *testing.T) {
	now := time.Unix(1, 0)
	stored := func(h uint64) *messages.Residency {
		return &messages.Residency{Tier: messages.GPU, Changes: []messages.ResidencyChange{{Stored: true, Hash: h, Tokens: []int64{int64(h)}}}}
	}
	v := NewView()
	apply := func(f Frame) {
		t.Helper()
		if err := v.Apply(f.Seq, f.Payload); err != nil {
			t.Fatalf("batch %d: %v", f.Seq, err)
		}
	}
	p1 := NewPublisher(Config{BlockSize: 1})
	run1 := []Frame{p1.Start(now)}
	for h := uint64(1); h <= 5; h++ {
		f, _ := p1.Apply(stored(h), now)
		run1 = append(run1, f)
	}
	for _, f := range run1 {
		apply(f)
	}
	for _, f := range run1 { // a replay of the same run from 0
		apply(f)
	}
	if got := v.Residency()[MediumGPU]; len(got) != 5 {
		t.Fatalf("after a replay of its own run the view holds %v", got)
	}
	p2 := NewPublisher(Config{BlockSize: 1}) // the node restarted
	apply(p2.Start(now))
	f, _ := p2.Apply(stored(100), now)
	apply(f)
	if got, want := v.Residency()[MediumGPU], p2.Residency()[MediumGPU]; !slices.Equal(got, want) {
		t.Fatalf("after the publisher restarted the view holds GPU %v, the publisher %v", got, want)
	}
}

// TestDecodeMapBatch: the batch as vLLM writes it once its EventBatch is not
// array_like (vllm/distributed/kv_events.py: EventBatch and KVCacheEvent
// without array_like, omit_defaults, events tagged "type"), written out by
// hand: {"ts", "events", "data_parallel_rank"} in vLLM's field order,
// events with the fields vLLM added since (extra_keys skipped; group_idx,
// kv_cache_spec_kind and kv_cache_spec_sliding_window kept). The rank may be left out (None), the keys
// come in any order, and a map without ts or events, or with a key twice,
// is an error.
func TestDecodeMapBatch(t *testing.T) {
	stored := "8c" + str("type") + str("BlockStored") + str("block_hashes") + "91" + "cf0000000000000001" +
		str("parent_block_hash") + "c0" + str("token_ids") + "92" + "01" + "ccc8" + str("block_size") + "02" +
		str("lora_id") + "c0" + str("medium") + str("GPU") + str("lora_name") + "c0" +
		str("extra_keys") + "91c0" + str("group_idx") + "01" + str("kv_cache_spec_kind") + str("sliding_window") +
		str("kv_cache_spec_sliding_window") + "cd1000"
	removed := "84" + str("type") + str("BlockRemoved") + str("block_hashes") + "91" + "cffedcba9876543210" +
		str("medium") + str("CPU") + str("group_idx") + "01"
	cleared := "81" + str("type") + str("AllBlocksCleared")
	events := "93" + stored + removed + cleared
	ts := "cb3ff8000000000000" // 1.5
	want := Batch{TS: 1.5, DPRank: 2, Events: []Event{
		{Kind: BlockStored, Hashes: []uint64{1}, Tokens: []int64{1, 200}, BlockSize: 2, Medium: MediumGPU,
			Group: 1, SpecKind: "sliding_window", SlidingWindow: 4096},
		{Kind: BlockRemoved, Hashes: []uint64{0xfedcba9876543210}, Medium: MediumCPU, Group: 1},
		{Kind: AllBlocksCleared},
	}}
	noRank := want
	noRank.DPRank = 0
	for name, tc := range map[string]struct {
		hex  string
		want Batch
	}{
		"vLLM's order":     {"83" + str("ts") + ts + str("events") + events + str("data_parallel_rank") + "02", want},
		"rank left out":    {"82" + str("ts") + ts + str("events") + events, noRank},
		"rank nil":         {"83" + str("ts") + ts + str("events") + events + str("data_parallel_rank") + "c0", noRank},
		"other order":      {"84" + str("data_parallel_rank") + "02" + str("events") + events + str("later_field") + "92c3c0" + str("ts") + ts, want},
		"array events":     {"82" + str("ts") + ts + str("events") + "91" + "91" + str("AllBlocksCleared"), Batch{TS: 1.5, Events: []Event{{Kind: AllBlocksCleared}}}},
		"no events at all": {"82" + str("ts") + ts + str("events") + "90", Batch{TS: 1.5, Events: []Event{}}},
	} {
		p, err := hex.DecodeString(tc.hex)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeBatch(p)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: decoded %+v, want %+v", name, got, tc.want)
		}
	}
	for name, h := range map[string]string{
		"no events":    "81" + str("ts") + ts,
		"no ts":        "81" + str("events") + "90",
		"ts twice":     "83" + str("ts") + ts + str("events") + "90" + str("ts") + ts,
		"int key":      "83" + "01" + ts + str("ts") + ts + str("events") + "90",
		"ts an int":    "82" + str("ts") + "01" + str("events") + "90",
		"rank a float": "83" + str("ts") + ts + str("events") + "90" + str("data_parallel_rank") + ts,
		"truncated":    "83" + str("ts") + ts + str("events") + "90",
	} {
		p, _ := hex.DecodeString(h)
		if _, err := DecodeBatch(p); !errors.Is(err, ErrDecode) {
			t.Errorf("%s: %v, want ErrDecode", name, err)
		}
	}
}

// gpuBatch stores n blocks of bs tokens on the GPU as the GPU tier reports
// them: each block's tokens a capped slice of one slab (blockpool's
// journal), which it returns with a flag set once the slab is garbage.
func gpuBatch(p *Publisher, n, bs int) (slab []int64, freed chan struct{}) {
	slab = make([]int64, n*bs)
	freed = make(chan struct{})
	runtime.AddCleanup(&slab[0], func(ch chan struct{}) { close(ch) }, freed)
	r := &messages.Residency{Tier: messages.GPU}
	for i := range n {
		for j := range bs {
			slab[i*bs+j] = int64(i*bs + j)
		}
		r.Changes = append(r.Changes, change(true, uint64(i+1), uint64(i), i > 0, slab[i*bs:(i+1)*bs:(i+1)*bs]...))
	}
	if _, ok := p.Apply(r, time.Unix(1, 0)); !ok {
		panic("nothing published")
	}
	return slab, freed
}

// TestPublisherKeepsNoSlab: a block the disk keeps long after the GPU
// dropped it keeps, in the Publisher, a copy of its own tokens, never the
// GPU's 64-block slab they came in: the slab is garbage once the GPU's
// message is, and the tokens published for the disk's block are still
// right.
func TestPublisherKeepsNoSlab(t *testing.T) {
	const n, bs = 64, 16
	p := NewPublisher(Config{BlockSize: bs})
	slab, freed := gpuBatch(p, n, bs)
	for _, b := range p.blocks {
		for i := range slab {
			if &slab[i] == &b.tokens[0] {
				t.Fatalf("the publisher keeps tokens at the slab's element %d", i)
			}
		}
	}
	slab = nil
	now := time.Unix(2, 0)
	p.Apply(&messages.Residency{Tier: messages.Disk, Changes: []messages.ResidencyChange{change(true, 5, 0, false)}}, now)
	gone := &messages.Residency{Tier: messages.GPU}
	for h := range uint64(n) {
		gone.Changes = append(gone.Changes, change(false, h+1, 0, false))
	}
	p.Apply(gone, now)
	deadline := time.Now().Add(10 * time.Second)
	for collected := false; !collected; {
		runtime.GC()
		select {
		case <-freed:
			collected = true
		default:
			if time.Now().After(deadline) {
				t.Fatal("the GPU's token slab is still reachable after the GPU dropped its blocks")
			}
			runtime.Gosched()
		}
	}
	snap, err := DecodeBatch(p.Snapshot(now).Payload)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int64, bs)
	for j := range want {
		want[j] = int64(4*bs + j)
	}
	if len(snap.Events) != 2 || !slices.Equal(snap.Events[1].Tokens, want) || snap.Events[1].Medium != MediumStorage {
		t.Fatalf("snapshot %+v, want the disk's block 5 with tokens %v", snap.Events, want)
	}
}

// TestDecodeOlderVLLMArrayEvents: the array events of the vLLM releases
// before medium and lora_name, written out by hand from their classes
// (array_like BlockStored [tag, block_hashes, parent_block_hash,
// token_ids, block_size, lora_id] then medium; BlockRemoved [tag,
// block_hashes]; the batch [ts, events]), decode with the fields they lack
// as nil. A BlockStored short of lora_id, which every release sends, is
// still an error.
func TestDecodeOlderVLLMArrayEvents(t *testing.T) {
	ts := "cb3ff8000000000000" // 1.5
	v09Stored := "96" + str("BlockStored") + "92" + "07" + "cd1234" + "c0" + "92" + "01" + "ccc8" + "02" + "c0"
	v010Stored := "97" + str("BlockStored") + "91" + "08" + "07" + "92" + "03" + "04" + "02" + "c0" + str("GPU")
	v09Removed := "92" + str("BlockRemoved") + "91" + "07"
	p, err := hex.DecodeString("92" + ts + "93" + v09Stored + v010Stored + v09Removed)
	if err != nil {
		t.Fatal(err)
	}
	want := Batch{TS: 1.5, Events: []Event{
		{Kind: BlockStored, Hashes: []uint64{7, 0x1234}, Tokens: []int64{1, 200}, BlockSize: 2},
		{Kind: BlockStored, Hashes: []uint64{8}, Parent: 7, HasParent: true, Tokens: []int64{3, 4}, BlockSize: 2, Medium: MediumGPU},
		{Kind: BlockRemoved, Hashes: []uint64{7}},
	}}
	got, err := DecodeBatch(p)
	if err != nil {
		t.Fatalf("older vLLM's array events: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	noLoRAID := "95" + str("BlockStored") + "91" + "07" + "c0" + "90" + "02"
	if p, err = hex.DecodeString("92" + ts + "91" + noLoRAID); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeBatch(p); !errors.Is(err, ErrDecode) {
		t.Fatalf("a BlockStored without lora_id: err %v, want ErrDecode", err)
	}
}

// TestDecodeSkipsExtFields: a field the decoder does not know is skipped
// whatever its msgpack type, extension types included (msgspec writes a
// datetime as the timestamp extension, fixext 4/8 or ext 8), in a map
// event, an array event's extra positions and the batch map; a truncated
// extension is still an error.
func TestDecodeSkipsExtFields(t *testing.T) {
	ts := "cb3ff8000000000000" // 1.5
	for name, ext := range map[string]string{
		"fixext 1":  "d4" + "01" + "aa",
		"fixext 4":  "d6" + "ff" + "5f5e1000",
		"fixext 8":  "d7" + "ff" + "0000000017d78400",
		"fixext 16": "d8" + "05" + strings.Repeat("ab", 16),
		"ext 8":     "c7" + "0c" + "ff" + strings.Repeat("00", 12),
		"ext 16":    "c8" + "0002" + "07" + "abcd",
		"ext 32":    "c9" + "00000001" + "07" + "ab",
		"in a list": "92" + "d4" + "01" + "aa" + "c0",
	} {
		removed := "83" + str("type") + str("BlockRemoved") + str("block_hashes") + "91" + "07" + str("created") + ext
		stored := "99" + str("BlockStored") + "91" + "08" + "c0" + "90" + "02" + "c0" + "c0" + "c0" + ext
		p, err := hex.DecodeString("83" + str("ts") + ts + str("when") + ext + str("events") + "92" + removed + stored)
		if err != nil {
			t.Fatal(err)
		}
		want := Batch{TS: 1.5, Events: []Event{
			{Kind: BlockRemoved, Hashes: []uint64{7}},
			{Kind: BlockStored, Hashes: []uint64{8}, Tokens: []int64{}, BlockSize: 2},
		}}
		got, err := DecodeBatch(p)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decoded %+v, want %+v", name, got, want)
		}
	}
	for name, ext := range map[string]string{"fixext 8": "d7ff0000", "ext 8": "c70cff0000", "ext 32 length": "c9ffffffff07"} {
		p, err := hex.DecodeString("82" + str("ts") + ts + str("when") + ext)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeBatch(p); !errors.Is(err, ErrDecode) {
			t.Errorf("truncated %s: err %v, want ErrDecode", name, err)
		}
	}
}

// TestPublisherFullResidency: a Full residency removes the medium's blocks
// it does not list (one BlockRemoved), stores those it lists
// that the medium lacks, and leaves the other mediums alone.
func TestPublisherFullResidency(t *testing.T) {
	now := time.Unix(100, 0)
	p := NewPublisher(Config{BlockSize: 2})
	p.Apply(&messages.Residency{Tier: messages.GPU, Changes: []messages.ResidencyChange{
		change(true, 30, 0, false, 1, 2), change(true, 10, 0, false, 3, 4), change(true, 20, 0, false, 5, 6)}}, now)
	p.Apply(&messages.Residency{Tier: messages.Pinned, Changes: []messages.ResidencyChange{change(true, 30, 0, false)}}, now)
	f, ok := p.Apply(&messages.Residency{Tier: messages.GPU, Full: true, Changes: []messages.ResidencyChange{
		change(true, 20, 0, false, 5, 6), change(true, 40, 20, true, 7, 8)}}, now)
	if !ok {
		t.Fatal("a Full residency that changed the GPU's published nothing")
	}
	b, err := DecodeBatch(f.Payload)
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{
		{Kind: BlockRemoved, Hashes: []uint64{30, 10}, Medium: MediumGPU},
		{Kind: BlockStored, Hashes: []uint64{40}, Parent: 20, HasParent: true, Tokens: []int64{7, 8}, BlockSize: 2, Medium: MediumGPU},
	}
	if !reflect.DeepEqual(b.Events, want) {
		t.Fatalf("events %+v, want %+v", b.Events, want)
	}
	wantRes := map[Medium][]uint64{MediumGPU: {20, 40}, MediumCPU: {30}}
	if got := p.Residency(); !reflect.DeepEqual(got, wantRes) {
		t.Fatalf("residency %v, want %v", got, wantRes)
	}
	// An empty Full residency empties its medium; a second one says nothing.
	if _, ok := p.Apply(&messages.Residency{Tier: messages.Pinned, Full: true}, now); !ok || p.Count(MediumCPU) != 0 {
		t.Fatalf("empty Full: published %v, CPU holds %d", ok, p.Count(MediumCPU))
	}
	if _, ok := p.Apply(&messages.Residency{Tier: messages.Pinned, Full: true}, now); ok {
		t.Fatal("an empty Full residency of an empty medium published a batch")
	}
}

// TestFullResidencyRemovesChildrenFirst: the blocks a Full residency
// removes come each before its parent, whatever order their hashes sort
// in, so that a consumer keeping a tree of parent links only ever removes
// leaves. They came in hash order: block 20 before its child 90.
func TestFullResidencyRemovesChildrenFirst(t *testing.T) {
	now := time.Unix(100, 0)
	p := NewPublisher(Config{BlockSize: 1})
	p.Apply(&messages.Residency{Tier: messages.GPU, Changes: []messages.ResidencyChange{
		change(true, 50, 0, false, 1), change(true, 20, 50, true, 2), change(true, 90, 20, true, 3), change(true, 10, 90, true, 4),
		change(true, 70, 20, true, 5), change(true, 5, 0, false, 6)}}, now)
	f, ok := p.Apply(&messages.Residency{Tier: messages.GPU, Full: true, Changes: []messages.ResidencyChange{change(true, 5, 0, false, 6)}}, now)
	if !ok {
		t.Fatal("a Full residency that emptied the chain published nothing")
	}
	b, err := DecodeBatch(f.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != 1 || b.Events[0].Kind != BlockRemoved {
		t.Fatalf("events %+v, want one BlockRemoved", b.Events)
	}
	parent := map[uint64]uint64{20: 50, 90: 20, 10: 90, 70: 20}
	seen := map[uint64]bool{}
	for _, h := range b.Events[0].Hashes {
		for c, par := range parent {
			if par == h && !seen[c] {
				t.Errorf("removed %v: block %d before its child %d", b.Events[0].Hashes, h, c)
			}
		}
		seen[h] = true
	}
	if len(seen) != 5 {
		t.Errorf("removed %v, want the 5 blocks of the chain", b.Events[0].Hashes)
	}
}

// TestPublisherStartForgets: Start's AllBlocksCleared makes consumers drop
// what they knew, so the Publisher forgets it too: a block stored again
// after it is announced again, and a snapshot, like a view that applied
// the stream, holds only what was stored since. (The Publisher kept its
// residency: the store after Start published nothing, and the snapshot
// and counts still held the cleared block.)
func TestPublisherStartForgets(t *testing.T) {
	now := time.Unix(100, 0)
	p := NewPublisher(Config{BlockSize: 1})
	v := NewView()
	apply := func(f Frame) {
		t.Helper()
		if err := v.Apply(f.Seq, f.Payload); err != nil {
			t.Fatal(err)
		}
	}
	apply(p.Start(now))
	f, _ := p.Apply(storedGPU(7), now)
	apply(f)
	apply(p.Start(now)) // as the events actor does when it stops
	if n := p.Count(MediumGPU); n != 0 {
		t.Fatalf("GPU holds %d blocks after AllBlocksCleared", n)
	}
	f, ok := p.Apply(storedGPU(7), now)
	if !ok {
		t.Fatal("a block stored after AllBlocksCleared was not announced")
	}
	apply(f)
	snap := NewView()
	s := p.Snapshot(now)
	if err := snap.Reset(s.Seq, s.Payload); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(v.Residency(), snap.Residency()) || !reflect.DeepEqual(v.Residency(), p.Residency()) {
		t.Fatalf("stream %v, snapshot %v, publisher %v", v.Residency(), snap.Residency(), p.Residency())
	}
}

// TestFullResidencyRemovalOrderCycleAndKeptChild: the order of a Full
// residency's removals on the shapes TestFullResidencyRemovesChildrenFirst
// leaves out: a cycle of parent links (1 <-> 2, a hash collision) with a
// child (3) hanging off it and a block its own parent (7) are each removed
// once, the child first; a child the residency lists (9) stays, and its
// parent (8) goes all the same.
func TestFullResidencyRemovalOrderCycleAndKeptChild(t *testing.T) {
	now := time.Unix(100, 0)
	p := NewPublisher(Config{BlockSize: 1})
	p.Apply(&messages.Residency{Tier: messages.GPU, Changes: []messages.ResidencyChange{
		change(true, 1, 2, true, 1), change(true, 2, 1, true, 2), change(true, 3, 1, true, 3),
		change(true, 8, 0, false, 4), change(true, 9, 8, true, 5), change(true, 7, 7, true, 6)}}, now)
	f, ok := p.Apply(&messages.Residency{Tier: messages.GPU, Full: true, Changes: []messages.ResidencyChange{change(true, 9, 8, true, 5)}}, now)
	if !ok {
		t.Fatal("a Full residency that removed blocks published nothing")
	}
	b, err := DecodeBatch(f.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != 1 || b.Events[0].Kind != BlockRemoved {
		t.Fatalf("events %+v, want one BlockRemoved", b.Events)
	}
	if got, want := b.Events[0].Hashes, []uint64{3, 2, 1, 8, 7}; !slices.Equal(got, want) {
		t.Errorf("removed %v, want %v (3 before 1; the cycle's 2 before 1; 9 kept)", got, want)
	}
}
