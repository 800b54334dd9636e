package gpu

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind, such
// as a stream worker that Close did not stop.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
