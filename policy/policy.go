package policy

import (
	"errors"
	"fmt"
)

// Key identifies a cached block: a chained block hash with the tenant salt
// already mixed in.
type Key = uint64

// Errors returned by New and ParseKind; test with errors.Is.
var (
	// ErrUnknownKind means the Kind or its name is not one of LRU, FIFO,
	// S3FIFO, ARC, Adaptive.
	ErrUnknownKind = errors.New("kvtier: policy: unknown kind")
	// ErrBadCapacity means the capacity passed to New is not positive.
	ErrBadCapacity = errors.New("kvtier: policy: capacity must be > 0")
	// ErrBadConfig means a policy's parameters are out of range.
	ErrBadConfig = errors.New("kvtier: policy: bad parameters")
)

// Policy orders the resident keys of one tier and picks eviction victims.
// Implementations are not safe for concurrent use.
type Policy interface {
	// Kind reports which policy this is.
	Kind() Kind
	// Add records that k became resident. Adding a key that is already
	// resident counts as an access to it.
	Add(k Key)
	// Access records a hit on a resident key. Unknown keys are ignored.
	Access(k Key)
	// Remove forgets k because it left the tier (deleted or moved elsewhere).
	// It is a no-op if k is not resident.
	Remove(k Key)
	// Evict chooses a victim among the resident keys for which evictable
	// returns true (a nil evictable accepts every key), removes it from the
	// policy and returns it. It returns false if no resident key is
	// evictable. Keys rejected by evictable stay resident and keep their
	// place. evictable must not call back into the policy.
	Evict(evictable func(Key) bool) (Key, bool)
	// Contains reports whether k is resident.
	Contains(k Key) bool
	// Len returns the number of resident keys.
	Len() int
}

// maxHint bounds the slice and map preallocation New does for a capacity, so
// that a huge disk tier does not pay for its whole index up front.
const maxHint = 1 << 16

// New returns an empty policy of the given kind. capacity is the number of
// entries the tier holds; S3-FIFO and ARC size their ghost queues (and
// S3-FIFO its small queue) from it,
// and every kind uses it as a preallocation hint. New returns an error
// wrapping ErrUnknownKind or ErrBadCapacity for bad input.
func New(kind Kind, capacity int) (Policy, error) {
	if !kind.Valid() {
		return nil, fmt.Errorf("kvtier: policy: new %v: %w", kind, ErrUnknownKind)
	}
	if capacity <= 0 {
		return nil, fmt.Errorf("kvtier: policy: new %v with capacity %d: %w", kind, capacity, ErrBadCapacity)
	}
	switch kind {
	case LRU:
		return newLRU(capacity), nil
	case FIFO:
		return newFIFO(capacity), nil
	case ARC:
		return newARC(capacity), nil
	case Adaptive:
		return newAdaptive(capacity, DefaultAdaptiveConfig()), nil
	case S3FIFO:
		return newS3FIFO(capacity, DefaultS3FIFOConfig()), nil
	}
	panic(fmt.Sprintf("kvtier: policy: kind %v is valid but New does not build it", kind))
}

func hint(capacity int) int { return min(capacity, maxHint) }
