//go:build !kvtier_actor

package main

// runActor is the stand-in used until the root package's Manager API is built:
// build with -tags kvtier_actor to measure the actor path (actor_bench.go).
func runActor(quick bool) (actorResult, error) {
	return actorResult{note: "actor path: not built (build with -tags kvtier_actor once package kvtier has the Manager API)"}, nil
}
