//go:build invariants

package stress

import "time"

// slowBuild: the invariants build walks every actor's state after every
// message, several times slower; tests that race copies against load
// deadlines scale their deadlines by it so the races still go both ways.
const slowBuild = 10

// testDeadline: see build_default_test.go; the invariants build is slower.
const testDeadline = 6 * time.Minute

// hangAfter: see build_default_test.go. The invariants build's phases take
// three to four times longer, and 30 s left a loaded 2-core machine (CI
// beside two other test runs, load average 5) failing TestConcurrentManager's
// third phase with every call canceled while it still made progress.
const hangAfter = 90 * time.Second
