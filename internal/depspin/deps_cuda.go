//go:build cuda

package depspin

import _ "gorgonia.org/cu"
