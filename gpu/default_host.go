//go:build !cuda

package gpu

// Backend names the backend Default returns in this build.
const Backend = "host"

// Default returns the device the build selects: without the cuda build
// tag, a host backend with no bandwidth limit and no fault hook.
func Default() (Device, error) { return NewHost(HostConfig{}) }
