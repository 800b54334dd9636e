package stress

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain proves that no goroutine outlives the tests: every Manager is closed
// and Close stops every actor, copy worker and timer.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
