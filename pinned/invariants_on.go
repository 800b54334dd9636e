//go:build invariants

package pinned

// invariantsEnabled runs CheckInvariants after every mutating call.
const invariantsEnabled = true
