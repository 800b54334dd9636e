package group

import (
	"context"
	"errors"
	"fmt"
)

// Collective is the host's reduction across the ranks of one
// tensor-parallel group: NCCL, gloo or gRPC in a real stack, Local for ranks
// in one process.
//
// Every rank calls AllReduceMin with the same opID, in the same order, once
// per reduction (as with an NCCL communicator); each gets the minimum of the
// values all ranks passed. When any rank cannot take part — its context
// ends, it fails — the call must return an error on every rank, never leave
// the others waiting: a group whose ranks disagree on whether a reduction
// happened serves different KV on different ranks.
type Collective interface {
	AllReduceMin(ctx context.Context, opID uint64, v int64) (int64, error)
}

// Errors of the group.
var (
	// ErrAborted is wrapped by every error of a reduction some rank left
	// (its context ended, it failed) and by an allocation some rank could
	// not make: the whole group gives up on the request.
	ErrAborted = errors.New("kvtier: group: aborted")
	// ErrClosed answers reductions on a closed Local.
	ErrClosed = errors.New("kvtier: group: collective closed")
	// ErrBadConfig is wrapped by every validation error of NewRank, RankConfig
	// and NewLocal.
	ErrBadConfig = errors.New("kvtier: group: bad config")
	// ErrNilContext refuses a reduction called with a nil context: it
	// arrives nowhere and changes nothing.
	ErrNilContext = errors.New("kvtier: group: nil context")
)

// RankError says which rank made reduction Op fail, and why. It matches
// ErrAborted and the rank's own error (errors.Is).
type RankError struct {
	Rank int
	Op   uint64
	Err  error
}

func (e *RankError) Error() string {
	return fmt.Sprintf("kvtier: group: rank %d left reduction %d: %v", e.Rank, e.Op, e.Err)
}

// Unwrap makes errors.Is match ErrAborted and the cause.
func (e *RankError) Unwrap() []error { return []error{ErrAborted, e.Err} }

// ConfigError names an invalid argument.
type ConfigError struct {
	Field  string
	Value  any
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("kvtier: group: config %s = %v: %s", e.Field, e.Value, e.Reason)
}

// Unwrap makes errors.Is(err, ErrBadConfig) hold.
func (e *ConfigError) Unwrap() error { return ErrBadConfig }
