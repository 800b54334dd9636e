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
// know them: a block found on disk at start whose record kept no chain).
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
	// Group is vLLM's group_idx: which KV cache group of a hybrid model
	// (full attention, sliding window, ...) stored or removed the blocks.
	// A model with one group, and every kvtier publisher, uses 0, which is
	// also what a missing or nil group_idx decodes to. A View keeps each
	// group's blocks apart, so that one group removing a hash does not hide
	// another's copy.
	Group int
	// SpecKind and SlidingWindow are a BlockStored's kv_cache_spec_kind
	// (e.g. "full_attention", "sliding_window") and
	// kv_cache_spec_sliding_window, for consumers that classify groups;
	// "" and 0 when not sent.
	SpecKind      string
	SlidingWindow int
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
	return 0, fmt.Errorf("kvtier: events: unknown format %q (map or array): %w", s, ErrBadConfig)
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

// groupFields says whether a BlockStored carries the fields vLLM sends for
// hybrid models (group_idx and the group's spec), which it omits when unset.
func groupFields(e *Event) bool { return e.Group != 0 || e.SpecKind != "" || e.SlidingWindow != 0 }

func (f Format) appendEvent(b []byte, e *Event) []byte {
	switch e.Kind {
	case BlockStored:
		n := 8
		if groupFields(e) {
			n += 3 // group_idx and the spec
			if f == FormatArray {
				n++ // extra_keys's place
			}
		}
		if f == FormatArray {
			b = appendArrayHeader(b, n)
			b = appendString(b, "BlockStored")
		} else {
			b = appendMapHeader(b, n)
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
		b = appendOptString(b, string(e.Medium))
		if f == FormatMap {
			b = appendString(b, "lora_name")
		}
		b = appendOptString(b, e.LoRAName)
		if !groupFields(e) {
			return b
		}
		// vLLM omits these defaults; the array form then needs extra_keys
		// (nil) before them to keep its positions.
		if f == FormatMap {
			b = appendString(b, "group_idx")
		} else {
			b = appendNil(b) // extra_keys
		}
		b = appendInt(b, int64(e.Group))
		if f == FormatMap {
			b = appendString(b, "kv_cache_spec_kind")
		}
		b = appendOptString(b, e.SpecKind)
		if f == FormatMap {
			b = appendString(b, "kv_cache_spec_sliding_window")
		}
		if e.SlidingWindow == 0 {
			return appendNil(b)
		}
		return appendInt(b, int64(e.SlidingWindow))
	case BlockRemoved:
		n := 3
		if e.Group != 0 {
			n++
		}
		if f == FormatArray {
			b = appendArrayHeader(b, n)
			b = appendString(b, "BlockRemoved")
			b = appendHashes(b, e.Hashes)
			b = appendOptString(b, string(e.Medium))
		} else {
			b = appendMapHeader(b, n)
			b = appendString(b, "type")
			b = appendString(b, "BlockRemoved")
			b = appendString(b, "block_hashes")
			b = appendHashes(b, e.Hashes)
			b = appendString(b, "medium")
			b = appendOptString(b, string(e.Medium))
			if n > 3 {
				b = appendString(b, "group_idx")
			}
		}
		if n > 3 {
			b = appendInt(b, int64(e.Group))
		}
		return b
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

// appendOptString appends s, or nil for "" (vLLM's None).
func appendOptString(b []byte, s string) []byte {
	if s == "" {
		return appendNil(b)
	}
	return appendString(b, s)
}
