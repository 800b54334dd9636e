package schedcache

import "errors"

// ErrBadArgs is wrapped by the error of a call whose arguments do not fit
// together (Append with a token count per sequence, or Commit with a
// computed count per sequence, of another length). Such a call changes
// nothing: it is refused before the Manager is asked.
var ErrBadArgs = errors.New("kvtier: schedcache: bad arguments")
