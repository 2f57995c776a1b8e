#!/usr/bin/env bash
# The GPU check (docs/gpu.md), for a GPU host with the NVIDIA driver and the CUDA toolkit; it
# runs from the GPU bundle (make gpu-bundle: build/gpu-bundle/gpu_check.sh) or from a checkout
# with a release build (build/rel/bin).  In at most 10 minutes:
#   1. a tracker on a free local port and 'rpc_agent --device cuda:0' (the agent's probe says
#      "no GPU: ..." and the script fails at once on a host without a GPU);
#   2. gpu_verify: every library operator (small shapes, as tests/gpu): the naive GPU schedule
#      and 8 random GPU states (one per sketch first), built by NVRTC and run on the GPU,
#      against the CPU reference (plain C, tests/support/ref_ops.c); then three of them tuned
#      through the fleet for a few trials, each state checked by the agent against the task's
#      GPU reference; any WRONG_ANSWER, RUNTIME_DEVICE or COMPILE_DEVICE fails;
#   3. fp32 matmul 4096^3 and ResNet-50's 3x3 conv2d (N1 C64 56x56 K64) tuned for a fixed
#      wall-time budget each (GPU_CHECK_BUDGET seconds, default 150; SIGINT at the end, the
#      best so far counts);
#   4. cuBLAS sgemm and cuDNN's best FMA convolution on the same shapes (gpu_vendor.cu, built
#      with the host's nvcc), and the lines
#        bench gpu_matmul_4096 VALUE GFLOPS         bench cublas_sgemm_4096 VALUE GFLOPS
#        bench gpu_matmul_4096/cublas RATIO x       (the issue asks for >= 0.7)
#        bench gpu_conv2d_resnet VALUE GFLOPS       bench cudnn_conv2d_resnet VALUE GFLOPS
#        bench gpu_conv2d_resnet/cudnn RATIO x
# Exit 0 when every check passed (the ratios are reported, not judged), 1 otherwise.
# GPU_CHECK_BUDGET=S, GPU_CHECK_TRIALS=N (per operator through the fleet, default 16),
# CUDA_HOME.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ -x "$here/bin/tuner" ]; then bin=$here/bin; verify=$here/bin/gpu_verify
else bin=$here/../build/rel/bin; verify=$here/../build/rel/tests/tools/gpu_verify; fi
budget=${GPU_CHECK_BUDGET:-150}
trials=${GPU_CHECK_TRIALS:-16}
cuda=${CUDA_HOME:-/usr/local/cuda}
t0=$(date +%s)
work=$(mktemp -d /tmp/gpu_check_XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
}
trap cleanup EXIT
fail() { echo "gpu_check: FAIL: $*"; exit 1; }
for b in tuner tracker rpc_agent; do
  [ -x "$bin/$b" ] || fail "no $bin/$b (make gpu-bundle, or make in a checkout)"
done
[ -x "$verify" ] || fail "no $verify (make gpu-bundle, or make in a checkout)"
echo "gpu_check: binaries in $bin ($("$bin/tuner" --version)), work in $work"

# ---- 1. tracker and GPU agent ----
"$bin/tracker" init-fleet --key "$work/fleet.key" >/dev/null || fail "tracker init-fleet"
port=$(( 20000 + $$ % 20000 ))
"$bin/tracker" --port $port --bind 127.0.0.1 --no-http --key "$work/fleet.key" --log-level warn \
  >"$work/tracker.log" 2>&1 &
pids+=($!)
"$bin/rpc_agent" --tracker 127.0.0.1:$port --key gpu --fleet-key "$work/fleet.key" \
  --device cuda:0 --log-level info >"$work/agent.log" 2>&1 &
agent=$!
pids+=($agent)
for i in $(seq 1 100); do
  grep -q "agent: GPU cuda:0" "$work/agent.log" && break
  kill -0 $agent 2>/dev/null || break
  sleep 0.2
done
if ! grep -q "agent: GPU cuda:0" "$work/agent.log"; then
  sleep 0.5
  fail "the GPU agent did not start: $(tail -n 3 "$work/agent.log")"
fi
gpu=$(grep -o "agent: GPU cuda:0: .*" "$work/agent.log" | head -n 1)
arch=$(echo "$gpu" | grep -o 'sm_[0-9]*' | head -n 1)
[ -n "$arch" ] || fail "no architecture in '$gpu'"
echo "gpu_check: $gpu"
target="cuda -arch=$arch"
tune() { # NAME SPEC TRIALS [timeout]: the tuner's output in $work/NAME.out
  local name=$1 spec=$2 n=$3 limit=${4:-0}
  local cmd=("$bin/tuner" --trials "$n" --target "$target" --tracker 127.0.0.1:$port --key gpu
             --fleet-key "$work/fleet.key" --wait-timeout 60 --db "$work/$name.db" "$spec")
  if [ "$limit" -gt 0 ]; then
    timeout -s INT -k 30 "$limit" "${cmd[@]}" >"$work/$name.out" 2>&1
  else
    "${cmd[@]}" >"$work/$name.out" 2>&1
  fi
}
gflops_of() { # NAME SPEC: the best GFLOPS in the tuner's summary
  awk -v t="$2" '$1 == t && NF >= 6 {v = $5} END {print v + 0}' "$work/$1.out"
}

# ---- 2. every library operator's GPU states against the CPU reference ----
"$verify" --arch "$arch" --states 8 || fail "GPU states differ from the CPU reference (above)"
# the same through the fleet: the agent checks every state against the GPU reference
ops=("matmul:M=64,N=48,K=32" "conv2d:N=1,C=8,H=14,W=14,K=16,R=3,S=3,pad=1,bias=1,relu=1"
     "softmax:M=2,N=256")
bad=0
for i in "${!ops[@]}"; do
  tune "op$i" "${ops[$i]}" "$trials" 120
  rc=$?
  errs=$(grep -E "^ +[0-9]+ x (WRONG_ANSWER|RUNTIME_DEVICE|COMPILE_DEVICE|COMPILE_HOST)" "$work/op$i.out")
  ok=$(awk -v t="${ops[$i]}" '$1 == t && NF >= 6 {print $3 - $6}' "$work/op$i.out")
  if [ $rc -ne 0 ] || [ -n "$errs" ] || [ "${ok:-0}" -le 0 ]; then
    echo "FAIL ${ops[$i]} through the fleet: exit $rc, ${ok:-0} states measured; $(echo $errs | head -c 300)"
    tail -n 5 "$work/op$i.out" | sed 's/^/    /'
    bad=1
  else
    echo "ok   ${ops[$i]} through the fleet: $ok states measured and checked by the agent"
  fi
done
[ $bad -eq 0 ] || fail "the GPU agent found wrong states (logs in $work)"

# ---- 3. tuning for a fixed wall-time budget ----
mm="matmul:M=4096,N=4096,K=4096"
conv="conv2d:N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1"
tune mm "$mm" 100000 "$budget"
tune conv "$conv" 100000 "$budget"
g_mm=$(gflops_of mm "$mm")
g_conv=$(gflops_of conv "$conv")
for t in mm conv; do
  if grep -qE "^ +[0-9]+ x (WRONG_ANSWER|RUNTIME_DEVICE)" "$work/$t.out"; then
    grep -E "^ +[0-9]+ x " "$work/$t.out"
    fail "tuning $t measured wrong or faulting states"
  fi
done
echo "bench gpu_matmul_4096 $g_mm GFLOPS"
echo "bench gpu_conv2d_resnet $g_conv GFLOPS"

# ---- 4. cuBLAS and cuDNN in the same run ----
vendor=""
if [ -x "$cuda/bin/nvcc" ] &&
   "$cuda/bin/nvcc" -O2 -o "$work/gpu_vendor" "$here/gpu_vendor.cu" 2>"$work/nvcc.log" \
     -lcublas -lcudnn -L"$cuda/lib64" -I"$cuda/include"; then
  vendor=$("$work/gpu_vendor" 2>&1) || { echo "gpu_check: gpu_vendor failed: $vendor"; vendor=""; }
else
  echo "gpu_check: the vendor benchmark was not built (no $cuda/bin/nvcc, or: $(tail -n 2 "$work/nvcc.log" 2>/dev/null))"
fi
c_mm=$(echo "$vendor" | awk '$1 == "cublas_sgemm" {print $5}')
c_conv=$(echo "$vendor" | awk '$1 == "cudnn_conv2d" {print $11}')
if [ -n "$c_mm" ]; then
  echo "bench cublas_sgemm_4096 $c_mm GFLOPS"
  echo "bench gpu_matmul_4096/cublas $(awk -v a="$g_mm" -v b="$c_mm" 'BEGIN {printf "%.2f", a / b}') x"
fi
if [ -n "$c_conv" ]; then
  echo "bench cudnn_conv2d_resnet $c_conv GFLOPS"
  echo "bench gpu_conv2d_resnet/cudnn $(awk -v a="$g_conv" -v b="$c_conv" 'BEGIN {printf "%.2f", a / b}') x"
fi
echo "gpu_check: done in $(( $(date +%s) - t0 )) s on $gpu (logs in $work)"
[ -n "$c_mm" ] && [ -n "$c_conv" ] || fail "no vendor reference"
exit 0
