package depspin

import (
	_ "github.com/asynkron/protoactor-go/actor"
	_ "github.com/cespare/xxhash/v2"
	_ "go.uber.org/goleak"
	_ "go.uber.org/zap"
	_ "golang.org/x/sys/unix"
	_ "gonum.org/v1/plot"
	_ "gonum.org/v1/plot/plotter"
	_ "gonum.org/v1/plot/vg"
)
