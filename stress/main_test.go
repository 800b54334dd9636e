package stress

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain proves that no goroutine outlives the tests: every Manager is closed
// and Close stops every actor, copy worker and timer. One exception, not
// ours: zmq4 v0.17's PUB socket leaves its writer goroutine waiting when
// Close lands while it is sending (pubMWriter.run waits again without
// looking at closed), one goroutine per event publisher closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}
