//go:build !invariants

package stress

import "time"

// slowBuild scales load deadlines (see build_invariants_test.go).
const slowBuild = 1

// testDeadline is how long one stress test may run before deadline ends
// the run (see deadline_test.go): CI runs take seconds each.
const testDeadline = 2 * time.Minute
