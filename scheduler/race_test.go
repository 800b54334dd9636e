//go:build race

package scheduler

// raceEnabled shrinks the trace-replay tests: the race detector makes the fake
// cache's per-token hashing some 40 times slower.
const raceEnabled = true
