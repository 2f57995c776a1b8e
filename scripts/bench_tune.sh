#!/usr/bin/env bash
# 'make bench-tune' (also the last part of 'make bench'): real tuning runs through a real
# tracker and agent, compared with the vendor libraries and the machine's peak measured in
# the same run.  docs/tuning.md ("The tuning benchmark") explains the set-up and figures.
#
#   scripts/bench_tune.sh [TRIALS]        default 1000 per task (BENCH_TUNE_TRIALS)
#   BENCH_TUNE_TASKS="conv2d_resnet50_nhwc" scripts/bench_tune.sh     some of the tasks only
#
# The agent runs on its own core (taskset -c 1, one kernel thread); the tuner, its build
# workers and the tracker share core 0.  Kernels are timed as TVM's CPU runners do
# (3 repeats of at least 100 ms each).  Each task is one tuner run of TRIALS trials.
# Output: "bench NAME VALUE UNIT" and "bench NAME/REFERENCE RATIO x" lines on stdout.
set -uo pipefail
cd "$(dirname "$0")/.."
TRIALS=${1:-${BENCH_TUNE_TRIALS:-1000}}
B=build/rel/bin
V=build/rel/tests/bench/bench_vendor
VENDOR="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=1"
ncpu=$(nproc)
AGENT_CPU=$((ncpu > 1 ? 1 : 0))
TUNER_CPU=0
work=$(mktemp -d /tmp/bench_tune.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

TASKS=(
  "matmul1024|matmul:M=1024,N=1024,K=1024|sgemm"
  "conv2d_resnet50|conv2d:N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1|conv"
  # the same layer in the layout a tuned model runs it in (docs/models.md, section 3b)
  "conv2d_resnet50_nhwc|conv2d:layout=NHWC,N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1|conv"
)
# BENCH_TUNE_TASKS="NAME ...": only these of the tasks above (default all)
if [ -n "${BENCH_TUNE_TASKS:-}" ]; then
  sel=()
  for t in "${TASKS[@]}"; do
    for n in $BENCH_TUNE_TASKS; do [ "${t%%|*}" = "$n" ] && sel+=("$t"); done
  done
  [ ${#sel[@]} -gt 0 ] || { echo "bench: BENCH_TUNE_TASKS names none of: ${TASKS[*]%%|*}" >&2; exit 2; }
  TASKS=("${sel[@]}")
fi

# ---- the references, on the agent's core, one thread ----
echo "# vendor references on cpu $AGENT_CPU, one thread: $VENDOR" >&2
vend=$(taskset -c $AGENT_CPU $VENDOR $V --threads 1 --reps 5 --what peak,sgemm,conv \
       --size 1024 --conv 1,64,56,56,64,3,3,1,1) || { echo "bench: bench_vendor failed" >&2; exit 1; }
echo "$vend"
fig() { echo "$vend" | awk -v n="$1" '$2 == n { print $3 }'; }
peak=$(fig peak_fma_1t)
blas=$(fig openblas_sgemm1024_1t)
dnnl_mm=$(fig onednn_sgemm1024_1t)
dnnl_conv=$(fig onednn_conv2d_N1C64H56W56K64R3S3_1t)

# ---- the fleet ----
$B/tracker init-fleet --fleet-key "$work/fleet.key" >/dev/null || exit 1
taskset -c $TUNER_CPU $B/tracker --port 0 --bind 127.0.0.1 --no-http --fleet-key "$work/fleet.key" \
  --log-level warn >"$work/tracker.out" 2>"$work/tracker.log" &
pids+=($!)
port=
for _ in $(seq 100); do
  port=$(sed -n 's/^tracker ready port=\([0-9]*\).*/\1/p' "$work/tracker.out")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "bench: the tracker did not start" >&2; cat "$work/tracker.log" >&2; exit 1; }
taskset -c $AGENT_CPU $B/rpc_agent --tracker 127.0.0.1:$port --key bench --fleet-key \
  "$work/fleet.key" --threads 1 --log-level warn 2>"$work/agent.log" &
pids+=($!)

status=0
for t in "${TASKS[@]}"; do
  IFS='|' read -r name spec kind <<<"$t"
  db="$work/$name.db"
  echo "# tuning $spec: $TRIALS trials (tuner on cpu $TUNER_CPU, agent on cpu $AGENT_CPU)" >&2
  start=$(date +%s.%N)
  if ! taskset -c $TUNER_CPU $B/tuner --tracker 127.0.0.1:$port --fleet-key "$work/fleet.key" \
      --key bench --target "llvm -mcpu=native -num-cores=1" --db "$db" --trials "$TRIALS" \
      --build-workers 1 --repeat 3 --min-repeat-ms 100 --seed 1 "$spec" >"$work/$name.out" \
      2>"$work/$name.err"; then
    echo "bench: tuning $spec failed" >&2
    tail -5 "$work/$name.err" >&2
    status=1
    continue
  fi
  cat "$work/$name.out" >&2
  $B/tuner history --db "$db" --all --json >"$work/$name.json" || { status=1; continue; }
  python3 - "$work/$name.json" "$work/$name.out" "$name" "$start" <<'EOF'
import json, re, sys, time
hist, out, name, start = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
g = json.load(open(hist))["groups"][0]
flops = g["flops"]
best = None
curve = []  # (trial, best cost so far)
for p in g["points"]:
    if p["error_code"] == 0 and (best is None or p["cost"] < best):
        best = p["cost"]
    curve.append((p["trial"], best))
final = curve[-1][1]
to90 = next(t for t, b in curve if b is not None and flops / b >= 0.9 * flops / final)
text = open(out).read()
m = re.search(r"(\d+) trials in ([0-9.]+) s \(([0-9.]+) trials/s\); agents busy (\d+)%", text)
print(f"bench tune_{name}_best {flops / final * 1e-9:.1f} GFLOPS")
print(f"bench tune_{name}_trials {len(g['points'])} trials")
print(f"bench tune_{name}_trials_to_90pct {to90 + 1} trials")
print(f"bench tune_{name}_failed {g['n_failed']} trials")
if m:
    print(f"bench tune_{name}_rate {m.group(3)} trials/s")
    print(f"bench tune_{name}_agent_busy {m.group(4)} %")
print(f"bench tune_{name}_wall {time.time() - start:.0f} s")
EOF
done >"$work/figures"
cat "$work/figures"
f() { awk -v n="$1" '$2 == n { print $3 }' "$work/figures"; }
ratio() { # NAME NUM DEN
  [ -n "$2" ] && [ -n "$3" ] && awk -v n="$1" -v a="$2" -v b="$3" \
    'BEGIN { if (b > 0) printf "bench %s %.2f x\n", n, a / b }'
}
mm=$(f tune_matmul1024_best)
cv=$(f tune_conv2d_resnet50_best)
cvh=$(f tune_conv2d_resnet50_nhwc_best)
best_vendor_mm=$(awk -v a="$blas" -v b="$dnnl_mm" 'BEGIN { print (a > b ? a : b) }')
ratio tune_matmul1024/best_vendor_sgemm "$mm" "$best_vendor_mm"
ratio tune_matmul1024/openblas_sgemm "$mm" "$blas"
ratio tune_matmul1024/onednn_sgemm "$mm" "$dnnl_mm"
ratio tune_matmul1024/peak "$mm" "$peak"
ratio tune_conv2d_resnet50/onednn_conv2d "$cv" "$dnnl_conv"
ratio tune_conv2d_resnet50/peak "$cv" "$peak"
ratio tune_conv2d_resnet50_nhwc/onednn_conv2d "$cvh" "$dnnl_conv"
ratio tune_conv2d_resnet50_nhwc/peak "$cvh" "$peak"
exit $status
