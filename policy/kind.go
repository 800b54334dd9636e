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
)

// String returns "lru", "fifo" or "s3fifo", and "Kind(n)" for other values.
func (k Kind) String() string {
	switch k {
	case LRU:
		return "lru"
	case FIFO:
		return "fifo"
	case S3FIFO:
		return "s3fifo"
	default:
		return "Kind(" + strconv.Itoa(int(k)) + ")"
	}
}

// Valid reports whether k is one of the defined kinds.
func (k Kind) Valid() bool { return k >= LRU && k <= S3FIFO }

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
	default:
		return 0, fmt.Errorf("kvtier: policy: parse %q: %w", s, ErrUnknownKind)
	}
}
