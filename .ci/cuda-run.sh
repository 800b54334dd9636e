#!/usr/bin/env bash
# cuda-run.sh — run on the GPU machine, from the project's root, what
# .ci/cuda-build.sh built (it copies this file to .gpucheck/run.sh).
set -u
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*"; }
mkdir -p /tmp/kvt /tmp/logs && xz -dc .gpucheck/bins.tar.xz | tar -xf - -C /tmp/kvt; B=/tmp/kvt/bins
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader
el tests
pids=()
for p in root:. gpu:gpu gpu_race:gpu gpu_tier:gpu/tier pinned:pinned actors:actors refengine:refengine \
         stress:stress events:events messages:messages; do
  n=${p%%:*}; d=${p#*:}
  (cd "$d" && timeout 280 "$B/$n.test" -test.v -test.count=1 -test.timeout=270s > "/tmp/logs/$n.log" 2>&1; echo "$n rc=$?") &
  pids+=($!)
done
wait "${pids[@]}"
el tests-done
for f in /tmp/logs/*.log; do
  echo "== $(basename "$f"): $(grep -c '^--- PASS' "$f") passed, $(grep -c '^--- SKIP' "$f") skipped"
  grep -E '^(--- FAIL|FAIL|panic:)' "$f" | head -5
done
el copy-suite
timeout 90 "$B/kvbench" -suite copy -json -dir /tmp > /tmp/logs/copy.json 2> /tmp/logs/copy.err; echo "kvbench copy rc=$?"
grep -E '"(device|d2h_gbps|h2d_gbps|layer_sep_d2h_gbps|layer_sep_h2d_gbps|layer_sep_time_ratio)"' /tmp/logs/copy.json
el demo
(cd /tmp && timeout 90 "$B/demo" > /tmp/logs/demo.txt 2>&1; echo "demo rc=$?")
grep -E 'hit ratio|replay wall' /tmp/logs/demo.txt
el done
tar -czf "$OUT/logs.tgz" -C /tmp logs
