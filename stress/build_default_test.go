//go:build !invariants

package stress

// slowBuild scales load deadlines (see build_invariants_test.go).
const slowBuild = 1
