#!/usr/bin/env bash
# cuda-build.sh — build the CUDA backend's checks here (no GPU needed) for a
# GPU machine that has a driver but no Go toolchain or network.
#
# gorgonia.org/cu v0.9.6 does not compile against CUDA 13's cuda.h (its
# cuCtxCreate calls take 3 arguments, CUDA 13's take 4; cuMemAdvise and
# cuMemPrefetchAsync take a CUmemLocation there). The driver API is
# ABI-stable, so the binaries are built against an older cuda.h and run on a
# newer driver: CUDA_INCLUDE names a directory holding a CUDA 11.x/12.x
# cuda.h and CUDA_STUBS one holding a stub libcuda.so. Without them the
# script takes both from Debian bookworm's non-free nvidia-cuda-dev (CUDA
# 11.8, a 774 MB download, cached in /tmp/kvtier-cuda).
#
# It writes .gpucheck/ (ignored by git): bins.tar.xz (the -tags cuda test
# binaries, the demo and kvbench) and run.sh. Then, with the device tool:
#   carry [".gpucheck"], command: bash .gpucheck/run.sh
# run.sh runs every binary's tests on the GPU, the copy suite and the demo,
# and leaves its logs in $OUT/logs.tgz.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
cache=/tmp/kvtier-cuda
if [ -z "${CUDA_INCLUDE:-}" ] || [ -z "${CUDA_STUBS:-}" ]; then
  CUDA_INCLUDE=$cache/include CUDA_STUBS=$cache/lib
  if [ ! -f "$CUDA_INCLUDE/cuda.h" ]; then
    mkdir -p "$cache/lists/partial" "$cache/deb"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm non-free" > "$cache/sources.list"
    o="-oDir::Etc::sourcelist=$cache/sources.list -oDir::Etc::sourceparts=- -oDir::State::Lists=$cache/lists"
    apt-get $o update >/dev/null
    (cd "$cache/deb" && apt-get $o download nvidia-cuda-dev)
    dpkg -x "$cache"/deb/nvidia-cuda-dev_*.deb "$cache/x"
    mkdir -p "$CUDA_INCLUDE" "$CUDA_STUBS"
    cp "$cache/x/usr/include/cuda.h" "$CUDA_INCLUDE/"
    cp "$cache/x/usr/lib/x86_64-linux-gnu/stubs/libcuda.so" "$CUDA_STUBS/"
    rm -rf "$cache/x" "$cache/deb"
  fi
fi
export CGO_ENABLED=1 CGO_CFLAGS="-I$CUDA_INCLUDE" CGO_LDFLAGS="-L$CUDA_STUBS"
mkdir -p .gpucheck
grep -qx '/.gpucheck/' .git/info/exclude 2>/dev/null || echo '/.gpucheck/' >> .git/info/exclude
out=$(mktemp -d)/bins
mkdir -p "$out"
# The packages whose tests reach the device (gpu.Default is CUDA under the tag).
for p in root:. gpu:gpu gpu_tier:gpu/tier pinned:pinned actors:actors refengine:refengine \
         stress:stress events:events messages:messages; do
  go test -tags cuda -ldflags="-s -w" -c -o "$out/${p%%:*}.test" "./${p#*:}"
done
go test -race -tags cuda -ldflags="-s -w" -c -o "$out/gpu_race.test" ./gpu
go build -tags cuda -ldflags="-s -w" -o "$out/demo" ./cmd/demo
go build -tags cuda -ldflags="-s -w" -o "$out/kvbench" ./cmd/kvbench
tar -cf - -C "$(dirname "$out")" bins | xz -T0 -6 > .gpucheck/bins.tar.xz
cp .ci/cuda-run.sh .gpucheck/run.sh
du -sh .gpucheck/bins.tar.xz
