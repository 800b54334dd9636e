package events

import (
	"fmt"

	"github.com/kvtier/kvtier/messages"
)

// Medium names a tier in events, as vLLM's offloading code spells its own
// ("GPU", "CPU", and "STORAGE" for its file-system tier); "REMOTE" is the
// shared tier.
type Medium string

// The mediums.
const (
	MediumGPU     Medium = "GPU"
	MediumCPU     Medium = "CPU"
	MediumStorage Medium = "STORAGE"
	MediumRemote  Medium = "REMOTE"
)

// Mediums lists the mediums in tier order, top first.
var Mediums = []Medium{MediumGPU, MediumCPU, MediumStorage, MediumRemote}

// MediumOf names tier t's medium ("" for a set of several tiers or none).
func MediumOf(t messages.Tier) Medium {
	switch t {
	case messages.GPU:
		return MediumGPU
	case messages.Pinned:
		return MediumCPU
	case messages.Disk:
		return MediumStorage
	case messages.Remote:
		return MediumRemote
	}
	return ""
}

func mediumBit(m Medium) uint8 {
	for i, x := range Mediums {
		if x == m {
			return 1 << i
		}
	}
	return 0
}

// Kind is an event's type, spelled as vLLM's tag.
type Kind uint8

// The kinds of events.
const (
	BlockStored Kind = iota + 1
	BlockRemoved
	AllBlocksCleared
)

func (k Kind) String() string {
	switch k {
	case BlockStored:
		return "BlockStored"
	case BlockRemoved:
		return "BlockRemoved"
	case AllBlocksCleared:
		return "AllBlocksCleared"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Event is one KV event, with vLLM's fields (vllm/distributed/kv_events.py).
// A BlockStored's Hashes form a chain: the first one's parent is Parent
// (none when !HasParent), each later one's parent the hash before it, and
// Tokens hold BlockSize token ids per hash (none when the publisher does not
// know them: a block found on disk at start).
type Event struct {
	Kind      Kind
	Hashes    []uint64
	Parent    uint64
	HasParent bool
	Tokens    []int64
	BlockSize int
	// LoRAName is the adapter's name; "" encodes as nil.
	LoRAName string
	Medium   Medium
}

// Batch is what one ZMQ message carries: events stamped with the time they
// were published (seconds since the Unix epoch) and the data-parallel rank
// of the engine that published them.
type Batch struct {
	TS     float64
	Events []Event
	DPRank int
}

// Format is how events are encoded inside a batch, which is always the
// positional array [ts, events, dp_rank].
type Format uint8

const (
	// FormatMap encodes each event as vLLM >= 0.24 does: a map whose
	// "type" entry is the tag, then the fields by name.
	FormatMap Format = iota
	// FormatArray encodes each event as older vLLM releases did (and
	// llm-d's indexer decodes): an array of the tag, then the fields in
	// order.
	FormatArray
)

func (f Format) String() string {
	if f == FormatArray {
		return "array"
	}
	return "map"
}

// ParseFormat parses "map" or "array".
func ParseFormat(s string) (Format, error) {
	switch s {
	case "map", "":
		return FormatMap, nil
	case "array":
		return FormatArray, nil
	}
	return 0, fmt.Errorf("kvtier: events: unknown format %q (map or array)", s)
}

// AppendBatch appends b's msgpack encoding in format f.
func (f Format) AppendBatch(dst []byte, b *Batch) []byte {
	dst = appendArrayHeader(dst, 3)
	dst = appendFloat64(dst, b.TS)
	dst = appendArrayHeader(dst, len(b.Events))
	for i := range b.Events {
		dst = f.appendEvent(dst, &b.Events[i])
	}
	return appendInt(dst, int64(b.DPRank))
}

func (f Format) appendEvent(b []byte, e *Event) []byte {
	switch e.Kind {
	case BlockStored:
		if f == FormatArray {
			b = appendArrayHeader(b, 8)
			b = appendString(b, "BlockStored")
		} else {
			b = appendMapHeader(b, 8)
			b = appendString(b, "type")
			b = appendString(b, "BlockStored")
			b = appendString(b, "block_hashes")
		}
		b = appendHashes(b, e.Hashes)
		if f == FormatMap {
			b = appendString(b, "parent_block_hash")
		}
		if e.HasParent {
			b = appendUint64(b, e.Parent)
		} else {
			b = appendNil(b)
		}
		if f == FormatMap {
			b = appendString(b, "token_ids")
		}
		b = appendArrayHeader(b, len(e.Tokens))
		for _, t := range e.Tokens {
			b = appendInt(b, t)
		}
		if f == FormatMap {
			b = appendString(b, "block_size")
		}
		b = appendInt(b, int64(e.BlockSize))
		if f == FormatMap {
			b = appendString(b, "lora_id")
		}
		b = appendNil(b) // deprecated in vLLM; the name identifies an adapter
		if f == FormatMap {
			b = appendString(b, "medium")
		}
		b = appendMedium(b, e.Medium)
		if f == FormatMap {
			b = appendString(b, "lora_name")
		}
		if e.LoRAName == "" {
			return appendNil(b)
		}
		return appendString(b, e.LoRAName)
	case BlockRemoved:
		if f == FormatArray {
			b = appendArrayHeader(b, 3)
			b = appendString(b, "BlockRemoved")
			b = appendHashes(b, e.Hashes)
			return appendMedium(b, e.Medium)
		}
		b = appendMapHeader(b, 3)
		b = appendString(b, "type")
		b = appendString(b, "BlockRemoved")
		b = appendString(b, "block_hashes")
		b = appendHashes(b, e.Hashes)
		b = appendString(b, "medium")
		return appendMedium(b, e.Medium)
	default:
		if f == FormatArray {
			return appendString(appendArrayHeader(b, 1), "AllBlocksCleared")
		}
		b = appendMapHeader(b, 1)
		b = appendString(b, "type")
		return appendString(b, "AllBlocksCleared")
	}
}

func appendHashes(b []byte, hs []uint64) []byte {
	b = appendArrayHeader(b, len(hs))
	for _, h := range hs {
		b = appendUint64(b, h)
	}
	return b
}

func appendMedium(b []byte, m Medium) []byte {
	if m == "" {
		return appendNil(b)
	}
	return appendString(b, string(m))
}

// DecodeBatch decodes a payload in either format, and the batch itself as
// the positional array [ts, events, dp_rank] (older vLLM, and what
// AppendBatch writes) or as the map vLLM writes once its EventBatch is no
// longer array_like: {"ts": ts, "events": [...], "data_parallel_rank":
// dp_rank}, the rank left out when None, keys in any order, keys it does
// not know skipped. It is strict where the schema is: every block hash must
// be a msgpack uint64, every list a list. It reads the batch and its
// events list as it goes, each event checked before the next is read, so
// what it allocates follows what the payload holds, not what its length
// prefixes claim.
func DecodeBatch(payload []byte) (Batch, error) {
	d := newDecoder(payload)
	var b Batch
	var err error
	if len(payload) > 0 && isMapHeader(payload[0]) {
		err = d.batchMap(&b)
	} else {
		err = d.batchArray(&b)
	}
	if err != nil {
		return b, err
	}
	if d.off != len(payload) {
		return b, d.fail("%d trailing bytes", len(payload)-d.off)
	}
	return b, nil
}

func isMapHeader(c byte) bool { return c&0xf0 == 0x80 || c == 0xde || c == 0xdf }

// batchArray decodes the batch [ts, events] or [ts, events, dp_rank].
func (d *decoder) batchArray(b *Batch) error {
	n, err := d.arrayHeader(0)
	if err != nil {
		return fmt.Errorf("%w (a batch is [ts, events, dp_rank] or a map of them)", err)
	}
	if n < 2 || n > 3 {
		return fmt.Errorf("%w: a batch is [ts, events, dp_rank], got an array of %d", ErrDecode, n)
	}
	if b.TS, err = d.ts(); err != nil {
		return err
	}
	if b.Events, err = d.events(); err != nil {
		return err
	}
	if n == 3 {
		b.DPRank, err = d.dpRank()
	}
	return err
}

// batchMap decodes the batch {"ts": ts, "events": [...],
// "data_parallel_rank": dp_rank}: ts and events required, each key at
// most once.
func (d *decoder) batchMap(b *Batch) error {
	n, err := d.mapHeader(0)
	if err != nil {
		return err
	}
	var seen [3]bool
	for range n {
		k, err := d.value(1)
		if err != nil {
			return err
		}
		key, ok := k.(string)
		if !ok {
			return fmt.Errorf("%w: batch key %T, want a string", ErrDecode, k)
		}
		i := -1
		switch key {
		case "ts":
			i = 0
			b.TS, err = d.ts()
		case "events":
			i = 1
			b.Events, err = d.events()
		case "data_parallel_rank":
			i = 2
			b.DPRank, err = d.dpRank()
		default:
			_, err = d.value(1) // a field vLLM added since
		}
		if err != nil {
			return err
		}
		if i >= 0 {
			if seen[i] {
				return fmt.Errorf("%w: batch key %q twice", ErrDecode, key)
			}
			seen[i] = true
		}
	}
	if !seen[0] || !seen[1] {
		return fmt.Errorf("%w: a batch map needs \"ts\" and \"events\"", ErrDecode)
	}
	return nil
}

// ts decodes a batch's timestamp, a float.
func (d *decoder) ts() (float64, error) {
	v, err := d.value(1)
	if err != nil {
		return 0, err
	}
	ts, ok := v.(float64)
	if !ok {
		return 0, fmt.Errorf("%w: ts is %T, want a float", ErrDecode, v)
	}
	return ts, nil
}

// dpRank decodes a batch's data-parallel rank, an int or nil (0).
func (d *decoder) dpRank() (int, error) {
	v, err := d.value(1)
	if err != nil || v == nil {
		return 0, err
	}
	r, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("%w: dp_rank is %T, want an int", ErrDecode, v)
	}
	return int(r), nil
}

// events decodes a batch's list of events.
func (d *decoder) events() ([]Event, error) {
	m, err := d.arrayHeader(1)
	if err != nil {
		return nil, fmt.Errorf("%w (events, want a list)", err)
	}
	evs := make([]Event, 0, min(m, maxPrealloc))
	for i := range m {
		v, err := d.value(2)
		if err != nil {
			return evs, fmt.Errorf("event %d: %w", i, err)
		}
		e, err := decodeEvent(v)
		if err != nil {
			return evs, fmt.Errorf("event %d: %w", i, err)
		}
		evs = append(evs, e)
	}
	return evs, nil
}

var storedFields = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"}

func decodeEvent(v any) (Event, error) {
	var tag string
	fields := map[string]any{}
	switch ev := v.(type) {
	case map[string]any:
		t, ok := ev["type"].(string)
		if !ok {
			return Event{}, fmt.Errorf("%w: event map without a string \"type\"", ErrDecode)
		}
		tag, fields = t, ev
	case []any:
		if len(ev) == 0 {
			return Event{}, fmt.Errorf("%w: empty event array", ErrDecode)
		}
		t, ok := ev[0].(string)
		if !ok {
			return Event{}, fmt.Errorf("%w: event tag %T, want a string", ErrDecode, ev[0])
		}
		tag = t
		names := storedFields
		if tag == "BlockRemoved" {
			names = []string{"block_hashes", "medium"}
		}
		for i, x := range ev[1:] {
			if i < len(names) {
				fields[names[i]] = x
			}
		}
	default:
		return Event{}, fmt.Errorf("%w: event is %T", ErrDecode, v)
	}
	var e Event
	var err error
	switch tag {
	case "BlockStored":
		e.Kind = BlockStored
		for _, f := range storedFields {
			if _, ok := fields[f]; !ok {
				return e, fmt.Errorf("%w: BlockStored without %q", ErrDecode, f)
			}
		}
		if e.Hashes, err = hashes(fields["block_hashes"]); err != nil {
			return e, err
		}
		switch p := fields["parent_block_hash"].(type) {
		case nil:
		case U64:
			e.Parent, e.HasParent = uint64(p), true
		default:
			return e, fmt.Errorf("%w: parent_block_hash is %T, want a uint64", ErrDecode, p)
		}
		toks, ok := fields["token_ids"].([]any)
		if !ok {
			return e, fmt.Errorf("%w: token_ids is %T", ErrDecode, fields["token_ids"])
		}
		e.Tokens = make([]int64, len(toks))
		for i, t := range toks {
			switch t := t.(type) {
			case int64:
				e.Tokens[i] = t
			case U64: // above MaxUint32, any encoder may choose 0xcf
				e.Tokens[i] = int64(t)
			default:
				return e, fmt.Errorf("%w: token id %T", ErrDecode, t)
			}
		}
		bs, ok := fields["block_size"].(int64)
		if !ok {
			return e, fmt.Errorf("%w: block_size is %T", ErrDecode, fields["block_size"])
		}
		e.BlockSize = int(bs)
		if l, ok := fields["lora_name"].(string); ok {
			e.LoRAName = l
		}
	case "BlockRemoved":
		e.Kind = BlockRemoved
		if e.Hashes, err = hashes(fields["block_hashes"]); err != nil {
			return e, err
		}
	case "AllBlocksCleared":
		e.Kind = AllBlocksCleared
		return e, nil
	default:
		return e, fmt.Errorf("%w: unknown event type %q", ErrDecode, tag)
	}
	switch m := fields["medium"].(type) {
	case nil:
	case string:
		e.Medium = Medium(m)
	default:
		return e, fmt.Errorf("%w: medium is %T", ErrDecode, m)
	}
	return e, nil
}

func hashes(v any) ([]uint64, error) {
	l, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: block_hashes is %T, want a list", ErrDecode, v)
	}
	out := make([]uint64, len(l))
	for i, h := range l {
		u, ok := h.(U64)
		if !ok {
			return nil, fmt.Errorf("%w: block hash %d is %T, want a msgpack uint64", ErrDecode, i, h)
		}
		out[i] = uint64(u)
	}
	return out, nil
}
