package pinned

import (
	"errors"
	"fmt"
)

// Errors returned by Pool methods; test with errors.Is.
var (
	// ErrNoSpace is returned by Reserve when no slot is free. The pool is
	// unchanged; the caller decides whether to evict or to deny the put.
	ErrNoSpace = errors.New("kvtier: pinned: no free slot")
	// ErrExists is returned by Reserve when the key is already resident or
	// being filled. The pool is unchanged.
	ErrExists = errors.New("kvtier: pinned: key already present")
	// ErrInUse is returned by Close while slots are being filled, drained or
	// read; the pool stays open.
	ErrInUse = errors.New("kvtier: pinned: pool in use")
	// ErrClosed is returned by a second Close.
	ErrClosed = errors.New("kvtier: pinned: pool closed")
	// ErrBadConfig is wrapped by every *ConfigError.
	ErrBadConfig = errors.New("kvtier: pinned: bad config")
	// ErrAlloc is returned by New when the pool's memory cannot be
	// allocated: the allocator (mmap, or Config.Alloc) failed, for example
	// with ENOMEM, or returned unusable memory. The error says how many
	// bytes were asked for and wraps the allocator's error. Nothing is
	// left allocated.
	ErrAlloc = errors.New("kvtier: pinned: cannot allocate pool memory")
)

// ConfigError reports one invalid Config field. It wraps ErrBadConfig.
type ConfigError struct {
	Field  string // the Config field name, e.g. "SlotBytes"
	Value  any    // the offending value
	Reason string // what is wrong with it
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("kvtier: pinned: config %s = %v: %s", e.Field, e.Value, e.Reason)
}

// Unwrap returns ErrBadConfig.
func (e *ConfigError) Unwrap() error { return ErrBadConfig }
