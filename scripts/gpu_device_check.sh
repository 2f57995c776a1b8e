#!/usr/bin/env bash
# The one command a session with a GPU machine runs (docs/gpu.md): the GPU bundle built here
# (make gpu-bundle; it travels as the ignored folder build/gpu-bundle, named in 'carry') runs
# its gpu_check.sh there, and the log comes back in $OUT.  From the device tool:
#   run(command="scripts/gpu_device_check.sh", carry=["build/gpu-bundle"], timeout_s=600)
# GPU_CHECK_BUDGET (default 150 s per tuned task) keeps the whole run under 10 minutes:
# about 10 s of start-up, 18 operators x a few seconds, 2 x the budget, the vendor
# benchmark (nvcc build and run, about 30 s).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu_device_check}
mkdir -p "$out"
b=build/gpu-bundle
[ -x "$b/gpu_check.sh" ] || { echo "no $b (run make gpu-bundle here and carry build/gpu-bundle)"; exit 1; }
{
  echo "== host"; uname -a; ldd --version 2>&1 | head -n 1
  echo "bundle needs $(cat $b/GLIBC 2>/dev/null)"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv 2>&1
  echo "== gpu_check"
} 2>&1 | tee "$out/gpu_check.log"
GPU_CHECK_BUDGET=${GPU_CHECK_BUDGET:-150} timeout -k 10 580 "$b/gpu_check.sh" 2>&1 |
  tee -a "$out/gpu_check.log"
rc=${PIPESTATUS[0]}
# the logs of the last check (tuner outputs, agent log), if small enough to come back
last=$(ls -td /tmp/gpu_check_* 2>/dev/null | head -n 1)
[ -n "$last" ] && tar -czf "$out/gpu_check_logs.tgz" -C "$last" --exclude='*.db' . 2>/dev/null
echo "gpu_device_check: exit $rc" | tee -a "$out/gpu_check.log"
exit $rc
