//go:build !invariants

package actors

const invariantsEnabled = false
