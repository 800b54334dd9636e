//go:build invariants

package stress

import "time"

// slowBuild: the invariants build walks every actor's state after every
// message, several times slower; tests that race copies against load
// deadlines scale their deadlines by it so the races still go both ways.
const slowBuild = 10

// testDeadline: see build_default_test.go; the invariants build is slower.
const testDeadline = 6 * time.Minute
