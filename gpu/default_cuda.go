//go:build cuda

package gpu

// Backend names the backend Default returns in this build.
const Backend = "cuda"

// Default returns the device the build selects: with the cuda build tag,
// CUDA device 0.
func Default() (Device, error) { return NewCUDA(CUDAConfig{Ordinal: 0}) }
