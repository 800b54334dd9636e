//go:build !invariants

package stress

import "time"

// slowBuild scales load deadlines (see build_invariants_test.go).
const slowBuild = 1

// testDeadline is how long one stress test may run before deadline ends
// the run (see deadline_test.go): CI runs take seconds each.
const testDeadline = 2 * time.Minute

// hangAfter bounds one phase of a stress test (its calls' context): past it
// the phase's calls fail as hung. Phases take seconds.
const hangAfter = 30 * time.Second
