package policy

import (
	"fmt"
	"strconv"
	"strings"
)

// Kind names an eviction policy. The zero value is not a valid Kind.
type Kind int

// The eviction policies.
const (
	// LRU evicts the least recently added or accessed key.
	LRU Kind = iota + 1
	// FIFO evicts the key that became resident first; accesses do not count.
	FIFO
	// S3FIFO is the small/main/ghost FIFO policy of the S3-FIFO paper.
	S3FIFO
	// ARC is Adaptive Replacement Cache: a recency list for keys seen once,
	// a frequency list for keys hit again, and ghost lists that move the
	// boundary between them. It keeps reused prefixes from being flushed by
	// one-use blocks and needs no tuning per trace.
	ARC
	// Adaptive ranks keys by their previous use, remembered beyond
	// eviction, evicts the deeper blocks of a request and partial blocks
	// first, and tunes its one parameter to the tier's size by scoring
	// shadow caches. See AdaptiveConfig.
	Adaptive
)

// String returns "lru", "fifo", "s3fifo" or "arc", and "Kind(n)" for other values.
func (k Kind) String() string {
	switch k {
	case LRU:
		return "lru"
	case FIFO:
		return "fifo"
	case S3FIFO:
		return "s3fifo"
	case ARC:
		return "arc"
	case Adaptive:
		return "adaptive"
	default:
		return "Kind(" + strconv.Itoa(int(k)) + ")"
	}
}

// Valid reports whether k is one of the defined kinds.
func (k Kind) Valid() bool { return k >= LRU && k <= Adaptive }

// ParseKind returns the Kind named by s. It accepts the String forms in any
// case, and "s3-fifo" for S3FIFO. An unknown name returns an error wrapping
// ErrUnknownKind.
func ParseKind(s string) (Kind, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "lru":
		return LRU, nil
	case "fifo":
		return FIFO, nil
	case "s3fifo", "s3-fifo":
		return S3FIFO, nil
	case "arc":
		return ARC, nil
	case "adaptive":
		return Adaptive, nil
	default:
		return 0, fmt.Errorf("kvtier: policy: parse %q: %w", s, ErrUnknownKind)
	}
}
