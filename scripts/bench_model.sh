#!/usr/bin/env bash
# 'make bench-model BUDGET=N': tune ResNet-18 with a budget of N trials for the whole model,
# then print one figure per line (as scripts/bench.sh does):
#   bench model_task/NAME GFLOPS GFLOPS     each task's best measured throughput
#   bench model_latency/exported MS ms      the whole model with the exported library's kernels
#   bench model_latency/pytorch MS ms       PyTorch's CPU latency for the same model (when
#                                           python3-torch and torchvision are installed)
#   bench model_latency/pytorch_ratio R x   exported / PyTorch, measured in the same run
# The model is torchvision's ResNet-18 exported with random weights when torch is installed
# (the same network PyTorch runs), else scripts/make_models.py's resnet18 (the same layout).
# PyTorch runs with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (docs: ENVIRONMENT).
#   scripts/bench_model.sh BUDGET [THREADS]
set -uo pipefail
cd "$(dirname "$0")/.."
budget=${1:-${BUDGET:-200}}
threads=${2:-$(nproc)}
tuner=build/rel/bin/tuner
py=/usr/bin/python3
[ -x "$tuner" ] || { echo "bench-model: build first (make)" >&2; exit 1; }

# The main tuning run ('tuner --trials N MODEL') belongs to the tuner's search (issue 7).
if ! "$tuner" --help 2>&1 | grep -q -- '--trials'; then
  echo "bench-model: SKIP: needs the tuner's search ('tuner --trials N MODEL', the tuner issue)," \
       "which this build does not have yet; nothing was measured" >&2
  exit 0
fi

work=$(mktemp -d /tmp/bench_model.XXXXXX)
trap 'rm -rf "$work"' EXIT
have_torch=0
$py -c 'import torch, torchvision' 2>/dev/null && have_torch=1
model=resnet18
[ $have_torch = 1 ] && model=tv_resnet18
$py scripts/make_models.py --out "$work" $model >/dev/null || { echo "bench-model: cannot make $model" >&2; exit 1; }
onnx=$work/$model.onnx
db=$work/tuning.db

# Ansor's round size: min(64, budget / tasks), so that every task gets its warm-up round
"$tuner" tasks -q -o "$work/tasks.jsonl" "$onnx" || { echo "bench-model: tuner tasks failed" >&2; exit 1; }
n_tasks=$(grep -c '"tunable":true' "$work/tasks.jsonl")
per_round=$(( budget / (n_tasks > 0 ? n_tasks : 1) ))
[ $per_round -gt 64 ] && per_round=64
[ $per_round -lt 1 ] && per_round=1
echo "# tuning $model: $n_tasks tasks, $budget trials, $per_round per round, $threads threads" >&2
"$tuner" --trials "$budget" --per-round "$per_round" --threads "$threads" --db "$db" "$onnx" >&2 ||
  { echo "bench-model: tuning failed" >&2; exit 1; }

# per-task best GFLOPS: the task list joined with 'tuner best --json'
"$tuner" best --db "$db" --json > "$work/best.json" || true
$py - "$work/tasks.jsonl" "$work/best.json" <<'EOF'
import json, sys
tasks = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
try:
    best = json.load(open(sys.argv[2]))["results"]
except Exception:
    best = []
g = {}
for r in best:
    g[r["workload_key"]] = max(g.get(r["workload_key"], 0.0), r.get("gflops", 0.0))
for i, t in enumerate(tasks):
    print("bench model_task/%02d_%s %.2f GFLOPS" % (i, t["name"], g.get(t["key"], 0.0)))
EOF

lib=$work/libresnet18_kernels.so
"$tuner" export-lib --db "$db" --threads "$threads" -o "$lib" "$onnx" >&2 || { echo "bench-model: export-lib failed" >&2; exit 1; }
ours=$("$tuner" run --lib "$lib" --threads "$threads" --repeat 20 "$onnx" | sed -n 's/^latency: \([0-9.]*\) ms.*/\1/p')
[ -n "$ours" ] || { echo "bench-model: tuner run failed" >&2; exit 1; }
echo "bench model_latency/exported $ours ms"

if [ $have_torch = 1 ]; then
  ref=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $py - "$threads" <<'EOF'
import statistics, sys, time
import torch, torchvision
torch.set_num_threads(int(sys.argv[1]))
torch.manual_seed(0)
net = torchvision.models.resnet18(weights=None).eval()
x = torch.randn(1, 3, 224, 224)
with torch.no_grad():
    for _ in range(5):
        net(x)
    t = []
    for _ in range(20):
        t0 = time.perf_counter()
        net(x)
        t.append(time.perf_counter() - t0)
print("%.3f" % (statistics.median(t) * 1e3))
EOF
)
  build=$($py -c 'import re, torch; c = torch.__config__.show(); b = re.search(r"BLAS_INFO=(\w+)", c); a = re.search(r"CPU capability usage: (\w+)", c); print("%s, BLAS %s, CPU capability %s" % (torch.__version__, b.group(1) if b else "?", a.group(1) if a else "?"))')
  echo "# pytorch $build; env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE, $threads threads" >&2
  echo "bench model_latency/pytorch $ref ms"
  $py -c "print('bench model_latency/pytorch_ratio %.3f x' % ($ours / $ref))"
else
  echo "# python3-torch/torchvision not installed: no PyTorch reference" >&2
fi
