package events

import (
	"fmt"
	"math"
)

// DecodeBatch decodes a payload in either format, and the batch itself as
// the positional array [ts, events, dp_rank] (older vLLM, and what
// AppendBatch writes) or as the map vLLM writes once its EventBatch is no
// longer array_like: {"ts": ts, "events": [...], "data_parallel_rank":
// dp_rank}, the rank left out when None, keys in any order, keys it does
// not know skipped. It is strict where the schema is: every block hash an
// int (any msgpack form; a negative one as its two's-complement bits) or
// at least 8 bytes (their last 8, big-endian, as vLLM turns a bytes hash
// into an int), every list a list. A BlockStored may end before medium
// and lora_name, as the array events of vLLM releases before them do.
//
// It reads each field straight into its Go type as it goes (token ids into
// the event's []int64, never a slice of boxed values), each event checked
// before the next is read, so what it allocates follows what the payload
// holds, not what its length prefixes claim: a list's slice costs at most
// 8 bytes for each of its elements, each at least a byte of the payload.
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

// batchArray decodes the batch [ts, events] or [ts, events, dp_rank].
func (d *decoder) batchArray(b *Batch) error {
	n, err := d.arrayHeader(0)
	if err != nil {
		return fmt.Errorf("%w (a batch is [ts, events, dp_rank] or a map of them)", err)
	}
	if n < 2 || n > 3 {
		return fmt.Errorf("%w: a batch is [ts, events, dp_rank], got an array of %d", ErrDecode, n)
	}
	if b.TS, err = d.float("ts"); err != nil {
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
		k, err := d.str("a batch key")
		if err != nil {
			return err
		}
		i := -1
		switch string(k) {
		case "ts":
			i = 0
			b.TS, err = d.float("ts")
		case "events":
			i = 1
			b.Events, err = d.events()
		case "data_parallel_rank":
			i = 2
			b.DPRank, err = d.dpRank()
		default:
			err = d.skip(1) // a field vLLM added since
		}
		if err != nil {
			return err
		}
		if i >= 0 {
			if seen[i] {
				return fmt.Errorf("%w: batch key %q twice", ErrDecode, k)
			}
			seen[i] = true
		}
	}
	if !seen[0] || !seen[1] {
		return fmt.Errorf("%w: a batch map needs \"ts\" and \"events\"", ErrDecode)
	}
	return nil
}

// dpRank decodes a batch's data-parallel rank, an int or nil (0).
func (d *decoder) dpRank() (int, error) {
	if d.isNil() {
		return 0, nil
	}
	r, u64, err := d.integer("dp_rank")
	if err == nil && u64 {
		err = fmt.Errorf("%w: dp_rank is a uint64, want an int", ErrDecode)
	}
	return int(r), err
}

// events decodes a batch's list of events.
func (d *decoder) events() ([]Event, error) {
	m, err := d.arrayHeader(1)
	if err != nil {
		return nil, fmt.Errorf("%w (events, want a list)", err)
	}
	evs := make([]Event, 0, min(m, maxPrealloc))
	for i := range m {
		e, err := d.event(2)
		if err != nil {
			return evs, fmt.Errorf("event %d: %w", i, err)
		}
		evs = append(evs, e)
	}
	return evs, nil
}

// An event's fields, numbered in vLLM's order of BlockStored's: bit f of a
// field set says field f was present.
const (
	fHashes = iota
	fParent
	fTokens
	fBlockSize
	fLoRAID
	fMedium
	fLoRAName
	fExtraKeys
	fGroup
	fSpecKind
	fSlidingWindow
	numFields
)

var fieldNames = [numFields]string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name",
	"extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"}

// storedRequired is how many of BlockStored's fields, in order, every
// vLLM release sends: block_hashes to lora_id. The ones after came later
// (medium in 0.10, lora_name after it) and an older release's array event
// ends before them; one left out decodes as nil.
const storedRequired = fMedium

// The positional (array-form) fields of each kind after its tag.
var (
	storedOrder  = []int{fHashes, fParent, fTokens, fBlockSize, fLoRAID, fMedium, fLoRAName, fExtraKeys, fGroup, fSpecKind, fSlidingWindow}
	removedOrder = []int{fHashes, fMedium, fGroup}
)

func fieldOf(name []byte) int {
	for f, n := range fieldNames {
		if string(name) == n {
			return f
		}
	}
	return -1
}

func kindOf(tag []byte) Kind {
	switch string(tag) {
	case "BlockStored":
		return BlockStored
	case "BlockRemoved":
		return BlockRemoved
	case "AllBlocksCleared":
		return AllBlocksCleared
	}
	return 0
}

// event decodes one event at depth depth, a map whose "type" is the tag
// (keys in any order, unknown ones skipped) or an array of the tag and
// then the kind's fields in order (more skipped, and the trailing ones an
// older vLLM did not have yet left out: see storedRequired).
func (d *decoder) event(depth int) (Event, error) {
	c, err := d.peek()
	if err != nil {
		return Event{}, err
	}
	var e Event
	var have uint16
	var tag []byte
	switch {
	case isMapHeader(c):
		n, err := d.mapHeader(depth)
		if err != nil {
			return e, err
		}
		for range n {
			k, err := d.str("an event key")
			if err != nil {
				return e, err
			}
			if string(k) == "type" {
				if c, err := d.peek(); err == nil && !isString(c) {
					return e, fmt.Errorf("%w: event map without a string \"type\" (it is %s)", ErrDecode, typeName(c))
				}
				if tag, err = d.str("type"); err != nil {
					return e, err
				}
				continue
			}
			f := fieldOf(k)
			if f < 0 {
				err = d.skip(depth + 1) // a field vLLM added since
			} else {
				have |= 1 << f
				err = d.field(&e, f, depth+1)
			}
			if err != nil {
				return e, err
			}
		}
		if tag == nil {
			return e, fmt.Errorf("%w: event map without a string \"type\"", ErrDecode)
		}
		e.Kind = kindOf(tag)
	case isArrayHeader(c):
		n, err := d.arrayHeader(depth)
		if err != nil {
			return e, err
		}
		if n == 0 {
			return e, fmt.Errorf("%w: empty event array", ErrDecode)
		}
		if tag, err = d.str("an event tag"); err != nil {
			return e, err
		}
		var order []int
		switch e.Kind = kindOf(tag); e.Kind {
		case BlockStored:
			order = storedOrder
		case BlockRemoved:
			order = removedOrder
		case 0:
			return e, fmt.Errorf("%w: unknown event type %q", ErrDecode, tag)
		}
		for i := range n - 1 {
			if i < len(order) {
				have |= 1 << order[i]
				err = d.field(&e, order[i], depth+1)
			} else {
				err = d.skip(depth + 1)
			}
			if err != nil {
				return e, err
			}
		}
	default:
		return e, d.fail("event is %s, want a map or an array", typeName(c))
	}
	switch e.Kind {
	case BlockStored:
		for f, name := range fieldNames[:storedRequired] {
			if have&(1<<f) == 0 {
				return e, fmt.Errorf("%w: BlockStored without %q", ErrDecode, name)
			}
		}
		return e, nil
	case BlockRemoved:
		if have&(1<<fHashes) == 0 {
			return e, fmt.Errorf("%w: BlockRemoved without \"block_hashes\"", ErrDecode)
		}
		return Event{Kind: BlockRemoved, Hashes: e.Hashes, Medium: e.Medium, Group: e.Group}, nil
	case AllBlocksCleared:
		return Event{Kind: AllBlocksCleared}, nil
	}
	return e, fmt.Errorf("%w: unknown event type %q", ErrDecode, tag)
}

// field decodes event field f, at depth depth, into e.
func (d *decoder) field(e *Event, f, depth int) error {
	var err error
	switch f {
	case fHashes:
		e.Hashes, err = d.hashes(depth)
	case fParent:
		e.Parent, e.HasParent = 0, false
		if !d.isNil() {
			e.Parent, err = d.blockHash("parent_block_hash")
			e.HasParent = err == nil
		}
	case fTokens:
		e.Tokens, err = d.tokens(depth)
	case fBlockSize:
		var bs int64
		var u64 bool
		bs, u64, err = d.integer("block_size")
		if err == nil && u64 {
			err = fmt.Errorf("%w: block_size is a uint64, want an int", ErrDecode)
		}
		e.BlockSize = int(bs)
	case fLoRAID:
		err = d.skip(depth) // deprecated in vLLM; the name identifies an adapter
	case fMedium:
		var m []byte
		m, err = d.optStr("medium")
		e.Medium = mediumOf(m)
	case fExtraKeys:
		err = d.skip(depth) // per-block hash inputs; kvtier's hashes say what they cover
	case fGroup:
		e.Group, err = d.optInt("group_idx")
	case fSpecKind:
		var k []byte
		k, err = d.optStr("kv_cache_spec_kind")
		e.SpecKind = string(k)
	case fSlidingWindow:
		e.SlidingWindow, err = d.optInt("kv_cache_spec_sliding_window")
	case fLoRAName:
		e.LoRAName = ""
		if c, perr := d.peek(); perr == nil && isString(c) {
			var l []byte
			l, err = d.str("lora_name")
			e.LoRAName = string(l)
		} else {
			err = d.skip(depth) // nil, or a form this decoder never used
		}
	}
	return err
}

// optStr decodes a string field vLLM may send as nil: nil is no bytes.
func (d *decoder) optStr(what string) ([]byte, error) {
	if d.isNil() {
		return nil, nil
	}
	return d.str(what)
}

// optInt decodes an int field vLLM may send as nil (its default): nil is 0.
// A value outside [0, MaxInt32] is refused: these are indexes and sizes.
func (d *decoder) optInt(what string) (int, error) {
	if d.isNil() {
		return 0, nil
	}
	v, u64, err := d.integer(what)
	if err != nil {
		return 0, err
	}
	if u64 {
		return 0, fmt.Errorf("%w: %s is %d, want 0..%d", ErrDecode, what, uint64(v), math.MaxInt32)
	}
	if v < 0 || v > math.MaxInt32 {
		return 0, fmt.Errorf("%w: %s is %d, want 0..%d", ErrDecode, what, v, math.MaxInt32)
	}
	return int(v), nil
}

// mediumOf is m as a Medium, without a copy for the known ones.
func mediumOf(m []byte) Medium {
	for _, x := range Mediums {
		if string(m) == string(x) {
			return x
		}
	}
	return Medium(m)
}

// hashes decodes a list of block hashes (see blockHash).
func (d *decoder) hashes(depth int) ([]uint64, error) {
	n, err := d.arrayHeader(depth)
	if err != nil {
		return nil, fmt.Errorf("%w (block_hashes, want a list)", err)
	}
	out := make([]uint64, n) // n is claimed: at most one a byte left
	for i := range out {
		if out[i], err = d.blockHash("a block hash"); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// tokens decodes a list of token ids, ints in any form.
func (d *decoder) tokens(depth int) ([]int64, error) {
	n, err := d.arrayHeader(depth)
	if err != nil {
		return nil, fmt.Errorf("%w (token_ids, want a list)", err)
	}
	out := make([]int64, n) // n is claimed: at most one a byte left
	for i := range out {
		// Above MaxUint32 any encoder may choose 0xcf: taken as its bits.
		if out[i], _, err = d.integer("a token id"); err != nil {
			return nil, err
		}
	}
	return out, nil
}
