//go:build invariants

package disk

const invariants = true
