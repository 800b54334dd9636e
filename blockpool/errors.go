package blockpool

import (
	"errors"
	"fmt"
)

var (
	// ErrBadConfig is wrapped by every Config validation error.
	ErrBadConfig = errors.New("kvtier: bad block pool config")
	// ErrEmptySequence rejects an allocation with no tokens.
	ErrEmptySequence = errors.New("kvtier: empty sequence")
	// ErrSequenceExists rejects allocating a sequence id that holds blocks.
	ErrSequenceExists = errors.New("kvtier: sequence already allocated")
	// ErrUnknownSequence rejects an operation on a sequence the pool does not hold,
	// including a second Deallocate of the same sequence.
	ErrUnknownSequence = errors.New("kvtier: unknown sequence")
	// ErrNoSpace is matched (errors.Is) by every *NoSpaceError.
	ErrNoSpace = errors.New("kvtier: not enough free blocks")
	// ErrTokenOutOfRange rejects a token id outside [0, VocabSize).
	ErrTokenOutOfRange = errors.New("kvtier: token id out of range")
	// ErrReservationExists rejects a second Reserve for the same request id.
	ErrReservationExists = errors.New("kvtier: request already holds a reservation")
	// ErrUnknownReservation rejects Release of a request with no reservation.
	ErrUnknownReservation = errors.New("kvtier: unknown reservation")
	// ErrBadArgument rejects a non-positive block count and similar arguments.
	ErrBadArgument = errors.New("kvtier: bad argument")
	// ErrBadCommit rejects a commit count the sequence cannot take: more
	// tokens than it holds, or negative other than AllTokens.
	ErrBadCommit = errors.New("kvtier: bad commit token count")
)

// NoSpaceError says how many blocks an operation needed and how many were free.
type NoSpaceError struct {
	Needed int
	Free   int
}

func (e *NoSpaceError) Error() string {
	return fmt.Sprintf("kvtier: not enough free blocks: need %d, %d free", e.Needed, e.Free)
}

// Is makes errors.Is(err, ErrNoSpace) hold.
func (e *NoSpaceError) Is(target error) bool { return target == ErrNoSpace }
