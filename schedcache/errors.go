package schedcache

import "errors"

// ErrBadArgs is wrapped by the error of a call whose arguments do not fit
// together (Append with a token count per sequence, Commit with a computed
// count per sequence or FreeFinished with an output count per sequence, of
// another length; FreeFinished with a negative count or a sequence named
// twice). Such a call changes nothing: it is refused before the Manager is
// asked.
var ErrBadArgs = errors.New("kvtier: schedcache: bad arguments")
