package refengine

import (
	"errors"
	"fmt"
)

// Sentinel errors. Callers branch on them with errors.Is; the returned
// errors wrap them with detail.
var (
	// ErrInvalidConfig is matched by every Config validation error. The
	// detail is a *ConfigError per offending field.
	ErrInvalidConfig = errors.New("kvtier: refengine: invalid config")
	// ErrBadArgument rejects a negative position, an empty token list, a
	// nil KVStore, a buffer of the wrong length and similar arguments. The
	// detail is an *ArgError.
	ErrBadArgument = errors.New("kvtier: refengine: bad argument")
	// ErrTokenOutOfRange rejects a token id outside [0, Vocab). The detail
	// is a *TokenError.
	ErrTokenOutOfRange = errors.New("kvtier: refengine: token id out of range")
	// ErrNotWritten is returned by MemKV.ReadKV for a position that was
	// never written (or was truncated away). Other KVStore implementations
	// may return it too; Forward wraps it in a *KVError.
	ErrNotWritten = errors.New("kvtier: refengine: kv position not written")
)

// ConfigError names one invalid field of a Config.
type ConfigError struct {
	Field  string // "Vocab", "DModel", "Layers", "Heads", "KVHeads", "MLPHidden"
	Value  int
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("kvtier: refengine: invalid %s %d: %s", e.Field, e.Value, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidConfig) hold.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// ArgError names one bad argument of a call.
type ArgError struct {
	Arg    string // the parameter's name: "start", "tokens", "kv", "n", ...
	Value  int    // its offending value (a length for slices)
	Reason string
}

func (e *ArgError) Error() string {
	return fmt.Sprintf("kvtier: refengine: bad %s %d: %s", e.Arg, e.Value, e.Reason)
}

// Unwrap makes errors.Is(err, ErrBadArgument) hold.
func (e *ArgError) Unwrap() error { return ErrBadArgument }

// TokenError names a token id outside the vocabulary.
type TokenError struct {
	Index int   // position of the token in the slice passed in
	Token int64 // the offending id
	Vocab int   // the model's vocabulary size
}

func (e *TokenError) Error() string {
	return fmt.Sprintf("kvtier: refengine: token %d at index %d outside [0,%d)", e.Token, e.Index, e.Vocab)
}

// Unwrap makes errors.Is(err, ErrTokenOutOfRange) hold.
func (e *TokenError) Unwrap() error { return ErrTokenOutOfRange }

// KVError wraps an error returned by a KVStore with the operation, layer
// and absolute token position the model asked for. Unwrap returns the
// store's error, so errors.Is sees through it.
type KVError struct {
	Op    string // "read" or "write"
	Layer int
	Pos   int
	Err   error
}

func (e *KVError) Error() string {
	return fmt.Sprintf("kvtier: refengine: kv %s layer %d pos %d: %v", e.Op, e.Layer, e.Pos, e.Err)
}

// Unwrap returns the store's error.
func (e *KVError) Unwrap() error { return e.Err }
