//go:build !invariants

package pinned

// invariantsEnabled runs CheckInvariants after every mutating call; build
// with -tags invariants to turn it on.
const invariantsEnabled = false
