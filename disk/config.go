package disk

import (
	"fmt"
	"math"

	"go.uber.org/zap"

	"github.com/kvtier/kvtier/policy"
)

// Config describes a Store. Open validates it and never modifies the
// caller's value; zero fields take the defaults noted below.
type Config struct {
	// Dir holds the slot files and the LOCK file; created (0700) if missing.
	// With OSFS it must not be a symbolic link and is tightened to 0700 if
	// it exists with looser permissions (see OSFS).
	Dir string
	// CapacityBytes bounds the total size of the slot files. The store has
	// CapacityBytes / SlotBytes(PayloadBytes) slots, at least Files and at
	// most MaxSlots.
	CapacityBytes int64
	// PayloadBytes is the largest payload one block may carry. Each slot is
	// one BlockSize header block plus PayloadBytes rounded up to BlockSize.
	PayloadBytes int
	// Fingerprint identifies the model and KV layout. Records written with
	// another fingerprint are dropped at Open.
	Fingerprint uint64
	// Policy picks eviction victims when every slot is in use; default
	// policy.Adaptive.
	Policy policy.Kind
	// Files spreads the slots round-robin over this many files; default 1.
	Files int
	// Sync makes every write durable against power loss: fdatasync after
	// the payload and again after the header, and Open syncs what it
	// changed: each slot file (a length cut to a smaller capacity), the
	// store directory and its parent (through DirSyncer, which OSFS
	// implements). Without it a write survives a process crash but not
	// necessarily a machine crash.
	Sync bool
	// NoDirectIO forces buffered I/O even where O_DIRECT works.
	NoDirectIO bool
	// FS is the file system; nil means OSFS.
	FS FS
	// Logger receives rare events (dropped records, I/O errors); nil means
	// zap.NewNop().
	Logger *zap.Logger
}

// Meta describes one block: its chained hash, its parent's hash, the tenant
// namespace, how many tokens it covers and its prefix digest. The store
// records every field in the block's header and checks all of them but
// Chain against its index when the block is read back.
type Meta struct {
	Hash      uint64
	Parent    uint64
	Namespace uint64
	Tokens    int
	// Digest is a collision-resistant digest of the block's whole prefix
	// (callers use a SHA-256 chain over the namespace and every token up to
	// the end of the block). The store does not compute it: it stores it
	// and compares it. Hash is only 64 bits and two prefixes may share it;
	// a read that names the digest it expects (PlanRead) is never served a
	// block stored with another one. The zero digest is a valid value for
	// callers that have none: zero matches zero.
	Digest [32]byte
	// Chain, when not nil, is the block's place in its chain, recorded in
	// the header's chain extension for the KV events a store reopened after
	// a restart announces (see record.go for what fits). It is metadata for
	// events only: never verified against a reader's, never used to serve.
	// The store keeps the caller's pointer until the write completes (the
	// caller must not change the Chain meanwhile) and then lets it go: the
	// Meta of a block written since Open has no Chain. A record Open found
	// has what its extension held, in memory of its own, handed out
	// read-only (Range, Meta, ReadOp.Meta) until Store.ReleaseChains: nil
	// for a record with none (written by older code, or a LoRA name too
	// long to fit) or a corrupt one (OpenReport.BadChains).
	Chain *Chain
	// Class is the class of the request whose commit first published the
	// block (policy.Hint.Class, 0 unknown), which a policy that reads hints
	// (policy.Adaptive) learns from when the write lands. It is not
	// recorded on disk: a record Open found has Class 0.
	Class uint8
}

// Chain is what KV events say of a block besides its hash: whether it has
// a parent (Meta.Parent then is its hash), its token ids and the LoRA
// adapter its KV was computed under.
type Chain struct {
	// HasParent: the block is not its chain's first; Meta.Parent is the
	// hash of the block before it.
	HasParent bool
	// TokenIDs are the block's token ids, Meta.Tokens of them; nil when
	// not known or not recorded (too many to fit the header block).
	TokenIDs []int64
	// LoRA names the adapter ("" for the base model).
	LoRA string
}

// MaxSlots is the most slots a Store has: slot numbers are int32. Open
// refuses a CapacityBytes of more with ErrInvalidConfig.
const MaxSlots = math.MaxInt32

// SlotBytes returns the on-disk size of one slot for a payload size: one
// header block plus the payload rounded up to BlockSize.
func SlotBytes(payloadBytes int) int64 { return BlockSize + roundUp(int64(payloadBytes)) }

// withDefaults validates c and returns a copy with defaults filled in.
func (c Config) withDefaults() (Config, error) {
	if c.Dir == "" {
		return c, fmt.Errorf("%w: empty Dir", ErrInvalidConfig)
	}
	if c.PayloadBytes <= 0 {
		return c, fmt.Errorf("%w: PayloadBytes %d must be > 0", ErrInvalidConfig, c.PayloadBytes)
	}
	if c.Files == 0 {
		c.Files = 1
	}
	if c.Files < 0 {
		return c, fmt.Errorf("%w: Files %d must be >= 0", ErrInvalidConfig, c.Files)
	}
	if c.Policy == 0 {
		c.Policy = policy.Adaptive
	}
	if !c.Policy.Valid() {
		return c, fmt.Errorf("%w: policy %v", ErrInvalidConfig, c.Policy)
	}
	if slots := c.CapacityBytes / SlotBytes(c.PayloadBytes); slots < int64(c.Files) {
		return c, fmt.Errorf("%w: CapacityBytes %d holds %d slots of %d bytes, need at least %d (Files)",
			ErrInvalidConfig, c.CapacityBytes, slots, SlotBytes(c.PayloadBytes), c.Files)
	} else if slots > MaxSlots {
		return c, fmt.Errorf("%w: CapacityBytes %d holds %d slots of %d bytes, at most %d",
			ErrInvalidConfig, c.CapacityBytes, slots, SlotBytes(c.PayloadBytes), MaxSlots)
	}
	if c.FS == nil {
		c.FS = OSFS{}
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c, nil
}

// recorded is m as decodeHeader reads it back from the record's verified
// fields: without the Chain, which reads compare nothing of, and without
// the Class, which is not recorded.
func (m Meta) recorded() Meta {
	m.Chain, m.Class = nil, 0
	return m
}
