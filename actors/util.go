package actors

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
)

func typeName(v any) string { return fmt.Sprintf("%T", v) }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// watch watches the actors an actor asks (nil: none), so that it hears
// *actor.Terminated when one stops for good and can answer what waited on
// it. Call it on *actor.Started.
func watch(ctx actor.Context, pids ...*actor.PID) {
	for _, pid := range pids {
		if pid != nil {
			ctx.Watch(pid)
		}
	}
}

// unwatch undoes watch on *actor.Stopping: the Manager stops an actor
// before those it asks, whose orderly stops are then not for it to hear
// (nor to make dead letters).
func unwatch(ctx actor.Context, pids ...*actor.PID) {
	for _, pid := range pids {
		if pid != nil {
			ctx.Unwatch(pid)
		}
	}
}
