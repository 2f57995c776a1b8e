#!/usr/bin/env bash
# 'make bench-model [TRIALS=N] [MODELS="..."]': whole models tuned and run here, next to
# ONNX Runtime and PyTorch on the same networks, measured in the same run.
#
# For each model (default: torchvision's ResNet-18 and MobileNetV2, and a 2-layer
# BERT-base-shaped encoder of torch.nn.TransformerEncoderLayer: d_model 768, 12 heads, ff
# 3072, GELU, sequence 128, float input; random weights, exported by torch at opset 13):
#   - tune it: 'tuner --trials N --threads T' on the embedded default (ResNet-18 also with
#     T = 1: a second store, its kernels tuned for one thread);
#   - export the library (what users ship) and time the whole model through it from a C
#     program (tests/tools/lib_run: P_model_run, median of REPEAT runs): the headline figure;
#     'tuner run' on the same records beside it;
#   - ONNX Runtime from PyPI in a throwaway venv made here (a benchmark peer, never a
#     dependency of the product) and PyTorch (Debian's python3-torch, /usr/bin/python3) on
#     the same network, each with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, the same
#     threads, median of REPEAT runs after a warm-up;
#   - the four are measured ROUNDS times (3), interleaved, and each figure is the median of
#     its rounds (this machine is shared: a slower spell then falls on all of them).
# One-thread figures run pinned to CPU 0 (taskset), all of them.  Lines:
#   bench model_NAME_Tt_ms X ms              ours: the library called from C
#   bench model_NAME_Tt_tuner_run_ms X ms    ours: tuner run on the same records
#   bench model_NAME_Tt_ort_ms / _torch_ms   the references
#   bench model_NAME_Tt/ort R x              ours / ORT (below 1: faster)
#   bench model_NAME_Tt/torch R x            ours / PyTorch
#   bench model_NAME_Tt_lib/tuner_run R x    the library against tuner run
#   bench model_NAME_Tt_tune_s S s, bench model_NAME_Tt_trials_per_s R trials/s
# Run it with nothing else on the machine (docs/models.md, "Benchmark").
set -uo pipefail
cd "$(dirname "$0")/.."
trials=${TRIALS:-${BUDGET:-1500}}
models=${MODELS:-tv_resnet18 tv_mobilenet_v2 tv_bert2}
repeat=${REPEAT:-50}
rounds=${ROUNDS:-3}
tuner=build/rel/bin/tuner
lib_run=build/rel/tests/tools/lib_run
py=/usr/bin/python3
[ -x "$tuner" ] && [ -x "$lib_run" ] || { echo "bench-model: build first (make)" >&2; exit 1; }
$py -c 'import torch, torchvision, onnx' 2>/dev/null ||
  { echo "bench-model: needs python3-torch, python3-torchvision, python3-onnx (make bench-model installs them)" >&2; exit 1; }

work=$(mktemp -d /tmp/bench_model.XXXXXX)
trap 'rm -rf "$work"' EXIT
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
isa=AVX2
grep -qw avx512f /proc/cpuinfo && isa=AVX-512
echo "# cpu: $cpu ($isa), $(nproc) CPUs; trials $trials per model and thread count" >&2

# the references' venv: thrown away with $work
echo "# ONNX Runtime: a venv from PyPI in $work/venv" >&2
python3 -m venv "$work/venv" >&2 && "$work/venv/bin/pip" install -q onnxruntime numpy >&2 ||
  { echo "bench-model: cannot install onnxruntime from PyPI" >&2; exit 1; }
ort_version=$("$work/venv/bin/python" -c 'import onnxruntime; print(onnxruntime.__version__)')
torch_version=$($py -c 'import re, torch; c = torch.__config__.show(); a = re.search(r"CPU capability usage: (\w+)", c); print(torch.__version__, a.group(1) if a else "")')
echo "# onnxruntime $ort_version; pytorch $torch_version (Debian); both with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset" >&2

cat > "$work/ort.py" <<'EOF'
import statistics, sys, time
import numpy as np
import onnxruntime as ort
path, threads, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
so = ort.SessionOptions()
so.intra_op_num_threads = threads
so.inter_op_num_threads = 1
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
feeds = {i.name: np.random.rand(*[d if isinstance(d, int) else 1 for d in i.shape]).astype(np.float32)
         for i in s.get_inputs()}
for _ in range(10):
    s.run(None, feeds)
t = []
for _ in range(repeat):
    t0 = time.perf_counter()
    s.run(None, feeds)
    t.append(time.perf_counter() - t0)
print("%.4f" % (statistics.median(t) * 1e3))
EOF
cat > "$work/torch_time.py" <<'EOF'
import statistics, sys, time
sys.path.insert(0, sys.argv[4])
import torch
import make_models
name, threads, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
net, x = make_models.torch_module(name)
with torch.no_grad():
    for _ in range(10):
        net(x)
    t = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        net(x)
        t.append(time.perf_counter() - t0)
print("%.4f" % (statistics.median(t) * 1e3))
EOF

ratio() { $py -c "print('%.3f' % ($1 / $2))"; }
# the median of the arguments (empty when one is missing: a run failed)
median() {
  [ $# -eq "$rounds" ] || return 0
  $py -c "import statistics, sys; print('%.3f' % statistics.median(map(float, sys.argv[1:])))" "$@"
}
status=0

# bench_one MODEL SHORTNAME THREADS
bench_one() {
  local model=$1 name=$2 th=$3 onnx=$work/$1.onnx db=$work/$2_$3t.db lib pin=""
  local tag="model_${name}_${th}t"
  [ "$th" = 1 ] && pin="taskset -c 0"
  echo "# $tag: tuning $model, $trials trials, $th thread(s)" >&2
  local t0=$(date +%s.%N)
  if ! "$tuner" --trials "$trials" --threads "$th" --db "$db" "$onnx" > "$work/$tag.tune" 2>&1; then
    echo "bench-model: tuning $model failed:" >&2; tail -5 "$work/$tag.tune" >&2; status=1; return
  fi
  local t1=$(date +%s.%N)
  grep -E 'trials in|^time:' "$work/$tag.tune" | sed 's/^/# /' >&2
  local tps=$(sed -n 's/.*trials in [0-9.]* s (\([0-9.]*\) trials\/s).*/\1/p' "$work/$tag.tune")
  echo "bench ${tag}_tune_s $($py -c "print('%.1f' % ($t1 - $t0))") s"
  echo "bench ${tag}_trials_per_s $tps trials/s"
  lib=$work/lib${name}_${th}t.so
  if ! "$tuner" export-lib --db "$db" --threads 2 -o "$lib" "$onnx" > "$work/$tag.export" 2>&1; then
    echo "bench-model: export-lib failed:" >&2; tail -3 "$work/$tag.export" >&2; status=1; return
  fi
  # ROUNDS rounds of the four, interleaved, so that a slower spell of a shared machine falls
  # on all of them; each figure is the median of its rounds' medians
  local a_ours="" a_trun="" a_ort="" a_tch=""
  for _ in $(seq "$rounds"); do
    a_ours+=" $($pin "$lib_run" "$lib" --threads "$th" --repeat "$repeat" --warmup 20 | sed -n 's/^latency: \([0-9.]*\) ms.*/\1/p')"
    a_trun+=" $($pin "$tuner" run --db "$db" --threads "$th" --repeat "$repeat" --no-check "$onnx" |
                sed -n 's/^latency: \([0-9.]*\) ms.*/\1/p')"
    a_ort+=" $(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $pin "$work/venv/bin/python" "$work/ort.py" "$onnx" "$th" "$repeat")"
    a_tch+=" $(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $pin $py "$work/torch_time.py" "$model" "$th" "$repeat" "$PWD/scripts")"
  done
  echo "# $tag rounds (ms): library$a_ours; tuner run$a_trun; ort$a_ort; torch$a_tch" >&2
  local ours=$(median $a_ours) trun=$(median $a_trun) ort=$(median $a_ort) tch=$(median $a_tch)
  if [ -z "$ours" ] || [ -z "$trun" ] || [ -z "$ort" ] || [ -z "$tch" ]; then
    echo "bench-model: $tag: a measurement failed (ours '$ours', tuner run '$trun', ort '$ort', torch '$tch')" >&2
    status=1; return
  fi
  echo "bench ${tag}_ms $ours ms"
  echo "bench ${tag}_tuner_run_ms $trun ms"
  echo "bench ${tag}_ort_ms $ort ms"
  echo "bench ${tag}_torch_ms $tch ms"
  echo "bench ${tag}/ort $(ratio "$ours" "$ort") x"
  echo "bench ${tag}/torch $(ratio "$ours" "$tch") x"
  echo "bench ${tag}_lib/tuner_run $(ratio "$ours" "$trun") x"
}

for model in $models; do
  $py scripts/make_models.py --out "$work" "$model" >/dev/null || { echo "bench-model: cannot make $model" >&2; status=1; continue; }
  name=${model#tv_}
  bench_one "$model" "$name" 2
  [ "$model" = tv_resnet18 ] && bench_one "$model" "$name" 1
done
exit $status
