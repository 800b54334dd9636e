package main

import (
	"bufio"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/kvtier/kvtier/gpu"
)

// Machine records where a report was measured.
type Machine struct {
	CPUModel   string `json:"cpu_model"`
	Cores      int    `json:"cores"` // runtime.NumCPU
	GoVersion  string `json:"go_version"`
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	GPUBackend string `json:"gpu_backend"` // gpu.Backend of this build
	Date       string `json:"date"`        // RFC 3339, UTC
}

func machineInfo() Machine {
	return Machine{
		CPUModel:   cpuModel(),
		Cores:      runtime.NumCPU(),
		GoVersion:  runtime.Version(),
		GOOS:       runtime.GOOS,
		GOARCH:     runtime.GOARCH,
		GPUBackend: gpu.Backend,
		Date:       time.Now().UTC().Format(time.RFC3339),
	}
}

// cpuModel reads the first "model name" of /proc/cpuinfo, or "unknown" where
// there is none (other systems, some ARM kernels).
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name", "Model", "cpu model":
			if v = strings.TrimSpace(v); v != "" {
				return v
			}
		}
	}
	return "unknown"
}
