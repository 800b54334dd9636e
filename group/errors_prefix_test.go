package group

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestErrorsPrefix: the group's errors start with "kvtier: ", as every other
// package's do ("kvtier: policy: ...", "kvtier: remote: ..."), so a log
// filter or a reader finds them alike. They said "kvtier/group: ".
func TestErrorsPrefix(t *testing.T) {
	_, errCfg := NewLocal(0)
	errs := []error{ErrAborted, ErrClosed, ErrBadConfig, ErrNilContext, errCfg,
		&RankError{Rank: 1, Op: 2, Err: context.Canceled}}
	for _, err := range errs {
		if err == nil || !strings.HasPrefix(err.Error(), "kvtier: group: ") {
			t.Errorf("%v: want the prefix \"kvtier: group: \"", err)
		}
	}
	if !errors.Is(errCfg, ErrBadConfig) {
		t.Errorf("NewLocal(0): %v, want ErrBadConfig", errCfg)
	}
}
