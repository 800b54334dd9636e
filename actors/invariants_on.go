//go:build invariants

package actors

// invariantsEnabled makes every tier actor walk its whole state after every
// message and panic on the first inconsistency (the stress tests build with it).
const invariantsEnabled = true
