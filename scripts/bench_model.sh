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
#   bench model_mobilenet_v2_2t_pretrained_H/scratch_N R x   MobileNetV2 tuned with H = N/2
#                                            trials in a copy of ResNet-18's store (its cost
#                                            model trains on its records) against N trials
#                                            from scratch (and against H from scratch): tuner
#                                            run, the medians of PRE_SEEDS seeds (3) each,
#                                            each store's figure the median of PRE_ROUNDS
#                                            interleaved rounds (9)
#   bench model_mobilenet_v2_2t_pretrained_H/scratch_N_kernels R x   the same stores' tuned
#                                            kernels as measured while tuning, summed over
#                                            the model's steps ('tuner run --profile': the
#                                            kernels' own timings, without the whole-model
#                                            run's noise)
# Run it with nothing else on the machine (docs/models.md, "Benchmark").
set -uo pipefail
cd "$(dirname "$0")/.."
trials=${TRIALS:-${BUDGET:-1500}}
models=${MODELS:-tv_resnet18 tv_mobilenet_v2 tv_bert_base}
# BERT (tv_bert_base, tv_bert_small): the buckets its sequence length is tuned for (a list,
# or a range whose buckets the tuner chooses: 16..256 is 12 of them, 1.25x apart), the
# length of the headline figure, a length between buckets, and the requests timed per runner
buckets=${BUCKETS:-16..256}
seq=${SEQ:-128}
seq_odd=${SEQ_ODD:-77}
requests=${REQUESTS:-1000}
# PyTorch runs BERT-base 10x slower than ORT (0.85 s a request at seq 128 on a 2-core Xeon:
# 1,000 requests were 45 minutes): its own count, at most 300 unless TORCH_REQUESTS says
torch_requests=${TORCH_REQUESTS:-$(( requests < 300 ? requests : 300 ))}
out_dir=${BENCH_OUT:-.}
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

# ---- a cost model pre-trained on another network (issue 16): MobileNetV2 tuned with half the
# trials in a copy of ResNet-18's store (its records, which the run's cost model trains on at
# its start and in every retrain), against the full trials and half of them from scratch in
# empty stores, with PRE_SEEDS seeds each (default 3: one tuning run against one decided
# nothing on a host whose runs of the same code differ by 15-25 %; seed 1's full run is the
# one above); all the stores timed with 'tuner run' in ROUNDS interleaved rounds. A store's
# figure is the median of its rounds, a line's the median of its seeds' stores.
# Back to back, one store's whole-model median moved 1.55 -> 1.95 ms on the 2-core Zen 5
# (2026-12-07) while its kernels' own timings sum to the same 1.36-1.40 ms whatever the
# store: PRE_ROUNDS rounds (default 9, 1.2 s each) and the kernels' sum beside them.
pre_seeds=${PRE_SEEDS:-3}
pre_rounds=${PRE_ROUNDS:-9}
[[ "$pre_rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench-model: PRE_ROUNDS must be a number >= 1, not '$pre_rounds'" >&2; exit 2; }
bench_pretrained() { # MODEL NAME THREADS SOURCE_DB
  local model=$1 name=$2 th=$3 src=$4 onnx=$work/$1.onnx half=$((trials / 2))
  local tag="model_${name}_${th}t" s v
  [ -f "$src" ] && [ -f "$work/${name}_${th}t.db" ] || return 0
  for s in $(seq "$pre_seeds"); do
    local pre=$work/${name}_${th}t_pre$s.db part=$work/${name}_${th}t_half$s.db full=$work/${name}_${th}t_full$s.db
    cp "$src" "$pre" || { status=1; return; }
    echo "# $tag seed $s: tuning $model, $half trials, in a copy of $(basename "$src") and in an empty store" >&2
    if ! "$tuner" --trials "$half" --threads "$th" --seed "$s" --db "$pre" "$onnx" > "$work/$tag.pre$s" 2>&1 ||
       ! "$tuner" --trials "$half" --threads "$th" --seed "$s" --db "$part" "$onnx" > "$work/$tag.half$s" 2>&1; then
      echo "bench-model: $tag: tuning with half the trials failed (seed $s)" >&2; status=1; return
    fi
    grep -E '^cost model:|trials in' "$work/$tag.pre$s" | sed "s/^/# pre-trained, seed $s: /" >&2
    if [ "$s" = 1 ]; then
      cp "$work/${name}_${th}t.db" "$full" || { status=1; return; }
    elif ! "$tuner" --trials "$trials" --threads "$th" --seed "$s" --db "$full" "$onnx" > "$work/$tag.full$s" 2>&1; then
      echo "bench-model: $tag: tuning from scratch failed (seed $s)" >&2; status=1; return
    fi
  done
  local -A a=() k=()
  for s in $(seq "$pre_seeds"); do
    for v in pre half full; do
      k[$v$s]=$("$tuner" run --db "$work/${name}_${th}t_$v$s.db" --threads "$th" --repeat 1 --no-check --profile "$onnx" |
                sed -n 's/.*the tasks. measured kernels sum to \([0-9.]*\) ms.*/\1/p')
    done
  done
  for _ in $(seq "$pre_rounds"); do
    for s in $(seq "$pre_seeds"); do
      for v in pre half full; do
        a[$v$s]+=" $("$tuner" run --db "$work/${name}_${th}t_$v$s.db" --threads "$th" --repeat "$repeat" --no-check "$onnx" |
                     sed -n 's/^latency: \([0-9.]*\) ms.*/\1/p')"
      done
    done
  done
  local m_pre="" m_half="" m_full="" k_pre="" k_half="" k_full=""
  for s in $(seq "$pre_seeds"); do
    echo "# $tag seed $s rounds (ms): pre-trained $half${a[pre$s]}; scratch $half${a[half$s]}; scratch $trials${a[full$s]}" >&2
    local p=$(rounds=$pre_rounds median ${a[pre$s]}) h=$(rounds=$pre_rounds median ${a[half$s]}) f=$(rounds=$pre_rounds median ${a[full$s]})
    if [ -z "$p" ] || [ -z "$h" ] || [ -z "$f" ] || [ -z "${k[pre$s]}" ] || [ -z "${k[half$s]}" ] || [ -z "${k[full$s]}" ]; then
      echo "bench-model: $tag: a pre-training measurement failed (seed $s)" >&2; status=1; return
    fi
    echo "# $tag seed $s: pre-trained $half $p ms, scratch $half $h ms, scratch $trials $f ms: pre-trained / scratch $trials $(ratio "$p" "$f"); kernels' sums ${k[pre$s]}, ${k[half$s]}, ${k[full$s]} ms: $(ratio "${k[pre$s]}" "${k[full$s]}")" >&2
    m_pre+=" $p" m_half+=" $h" m_full+=" $f" k_pre+=" ${k[pre$s]}" k_half+=" ${k[half$s]}" k_full+=" ${k[full$s]}"
  done
  local p=$(rounds=$pre_seeds median $m_pre) h=$(rounds=$pre_seeds median $m_half) f=$(rounds=$pre_seeds median $m_full)
  local kp=$(rounds=$pre_seeds median $k_pre) kh=$(rounds=$pre_seeds median $k_half) kf=$(rounds=$pre_seeds median $k_full)
  echo "bench ${tag}_pretrained_${half}_ms $p ms"
  echo "bench ${tag}_scratch_${half}_ms $h ms"
  echo "bench ${tag}_scratch_${trials}_ms $f ms"
  echo "bench ${tag}_pretrained_${half}/scratch_${trials} $(ratio "$p" "$f") x"
  echo "bench ${tag}_pretrained_${half}/scratch_${half} $(ratio "$p" "$h") x"
  echo "bench ${tag}_pretrained_${half}_kernels_ms $kp ms"
  echo "bench ${tag}_scratch_${half}_kernels_ms $kh ms"
  echo "bench ${tag}_scratch_${trials}_kernels_ms $kf ms"
  echo "bench ${tag}_pretrained_${half}/scratch_${trials}_kernels $(ratio "$kp" "$kf") x"
  echo "bench ${tag}_pretrained_${half}/scratch_${half}_kernels $(ratio "$kp" "$kh") x"
}

# ---- BERT as users ship it: token ids and an attention mask, the sequence dimension symbolic,
# tuned for buckets; REQUESTS requests each for the library (from C) and ORT, TORCH_REQUESTS for PyTorch, on the
# same ids and mask, in ROUNDS interleaved rounds; the outputs compared with ORT's at SEQ and
# at SEQ_ODD (a length between buckets, on the next bucket's kernels); the three latency
# distributions drawn on the same axes (tuner plot-latency).
cat > "$work/ref_bert.py" <<'EOF'
import os, sys, time
import numpy as np
mode, model, indir, threads, n, lat_path = sys.argv[1:7]
threads, n = int(threads), int(n)
out_path = sys.argv[7] if len(sys.argv) > 7 else None
S = os.path.getsize(os.path.join(indir, "input_0.bin")) // 8
ids = np.fromfile(os.path.join(indir, "input_0.bin"), np.int64).reshape(1, S)
mask = np.fromfile(os.path.join(indir, "input_1.bin"), np.int64).reshape(1, S)
if mode == "ort":
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    feeds = {"input_ids": ids, "attention_mask": mask}
    run = lambda: s.run(None, feeds)[0]
else:
    sys.path.insert(0, mode)     # the scripts folder: make_models.torch_module
    import torch, make_models
    torch.set_num_threads(threads)
    net, _ = make_models.torch_module(os.path.basename(model)[:-5])
    ti, tm = torch.from_numpy(ids), torch.from_numpy(mask)
    def run():
        with torch.no_grad():
            return net(ti, tm).numpy()
for _ in range(min(10, n)):
    y = run()
t = []
for _ in range(n):
    t0 = time.perf_counter()
    run()
    t.append(time.perf_counter() - t0)
with open(lat_path, "w") as f:
    f.write("".join("%.6f\n" % (x * 1e3) for x in t))
if out_path:
    np.asarray(y, np.float32).tofile(out_path)
EOF
cat > "$work/inputs.py" <<'EOF'
import os, sys
import numpy as np
d, S, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(d, exist_ok=True)
rng = np.random.RandomState(S)
rng.randint(0, vocab, (1, S)).astype(np.int64).tofile(os.path.join(d, "input_0.bin"))
np.ones((1, S), np.int64).tofile(os.path.join(d, "input_1.bin"))
EOF
# the largest relative difference max|a - b| / max|b| of two float32 files (b: the reference)
rel_diff() { $py -c "import numpy as np, sys; a = np.fromfile(sys.argv[1], np.float32); b = np.fromfile(sys.argv[2], np.float32); print('%.3g' % (np.abs(a - b).max() / np.abs(b).max()) if a.size == b.size else 'size')" "$1" "$2"; }
pctl() { $py -c "import numpy as np, sys; v = np.concatenate([np.loadtxt(f, ndmin=1) for f in sys.argv[2:]]); print('%.3f' % np.percentile(v, float(sys.argv[1])))" "$@"; }

# bench_bert MODEL SHORTNAME (2 threads)
bench_bert() {
  local model=$1 name=$2 th=2 onnx=$work/$1.onnx db=$work/$2.db lib=$work/lib$2.so
  local tag="model_${name}_2t" vocab
  vocab=$($py -c "import sys; sys.path.insert(0, 'scripts'); import make_models; print(make_models.BERTS['$model']['vocab'])")
  echo "# $tag: tuning $model for seq buckets $buckets, $trials trials, $th threads" >&2
  local t0=$(date +%s.%N)
  if ! "$tuner" --trials "$trials" --threads "$th" --dim "seq=$buckets" --db "$db" "$onnx" > "$work/$tag.tune" 2>&1; then
    echo "bench-model: tuning $model failed:" >&2; tail -5 "$work/$tag.tune" >&2; status=1; return
  fi
  local t1=$(date +%s.%N)
  grep -E 'trials in|^time:' "$work/$tag.tune" | sed 's/^/# /' >&2
  echo "bench ${tag}_tune_s $($py -c "print('%.1f' % ($t1 - $t0))") s"
  echo "bench ${tag}_trials_per_s $(sed -n 's/.*trials in [0-9.]* s (\([0-9.]*\) trials\/s).*/\1/p' "$work/$tag.tune") trials/s"
  if ! "$tuner" export-lib --db "$db" --threads 2 -o "$lib" "$onnx" > "$work/$tag.export" 2>&1; then
    echo "bench-model: export-lib failed:" >&2; tail -3 "$work/$tag.export" >&2; status=1; return
  fi
  grep -E 'buckets|weights' "$work/$tag.export" | sed 's/^/# /' >&2
  for s in "$seq" "$seq_odd"; do $py "$work/inputs.py" "$work/in$s" "$s" "$vocab"; done
  # the outputs against ORT's on the same ids and mask, at SEQ and between buckets
  for s in "$seq" "$seq_odd"; do
    mkdir -p "$work/out$s"
    "$lib_run" "$lib" --threads "$th" --dim "seq=$s" --inputs "$work/in$s" --repeat 1 --warmup 0 --dump "$work/out$s" >/dev/null &&
      env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$work/venv/bin/python" "$work/ref_bert.py" ort "$onnx" "$work/in$s" "$th" 1 /dev/null "$work/ort$s.bin" ||
      { echo "bench-model: $tag: a run at seq $s failed" >&2; status=1; return; }
    echo "bench ${tag}_seq${s}_vs_ort_rel_err $(rel_diff "$work/out$s/output_0.bin" "$work/ort$s.bin") x"
  done
  # REQUESTS requests each at SEQ, in ROUNDS interleaved rounds; in each round also 200/ROUNDS
  # requests of ours and ORT at SEQ_ODD (between buckets: ours on the next bucket, padded),
  # so that a slow spell of the host falls on both sides of every comparison
  local per=$(( (requests + rounds - 1) / rounds )) per_odd=$(( (200 + rounds - 1) / rounds )) r
  local per_torch=$(( (torch_requests + rounds - 1) / rounds ))
  for r in $(seq "$rounds"); do
    "$lib_run" "$lib" --threads "$th" --dim "seq=$seq" --inputs "$work/in$seq" --repeat "$per" --warmup 20 --latencies "$work/ours.$r" >/dev/null || { status=1; return; }
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$work/venv/bin/python" "$work/ref_bert.py" ort "$onnx" "$work/in$seq" "$th" "$per" "$work/ort.$r" || { status=1; return; }
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $py "$work/ref_bert.py" "$PWD/scripts" "$onnx" "$work/in$seq" "$th" "$per_torch" "$work/torch.$r" || { status=1; return; }
    "$lib_run" "$lib" --threads "$th" --dim "seq=$seq_odd" --inputs "$work/in$seq_odd" --repeat "$per_odd" --warmup 20 --latencies "$work/ours_odd.$r" >/dev/null || { status=1; return; }
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$work/venv/bin/python" "$work/ref_bert.py" ort "$onnx" "$work/in$seq_odd" "$th" "$per_odd" "$work/ort_odd.$r" || { status=1; return; }
    echo "# $tag round $r: p50 ours $(pctl 50 "$work/ours.$r") ms, ort $(pctl 50 "$work/ort.$r") ms, torch $(pctl 50 "$work/torch.$r") ms; seq $seq_odd: ours $(pctl 50 "$work/ours_odd.$r") ms, ort $(pctl 50 "$work/ort_odd.$r") ms" >&2
  done
  cat "$work"/ours.[0-9]* > "$work/ours.txt"; cat "$work"/ort.[0-9]* > "$work/ort.txt"; cat "$work"/torch.[0-9]* > "$work/torch.txt"
  local ours=$(pctl 50 "$work/ours.txt") ort=$(pctl 50 "$work/ort.txt") tch=$(pctl 50 "$work/torch.txt")
  echo "bench ${tag}_seq${seq}_p50_ms $ours ms"
  echo "bench ${tag}_seq${seq}_p99_ms $(pctl 99 "$work/ours.txt") ms"
  echo "bench ${tag}_seq${seq}_ort_p50_ms $ort ms"
  echo "bench ${tag}_seq${seq}_ort_p99_ms $(pctl 99 "$work/ort.txt") ms"
  echo "bench ${tag}_seq${seq}_torch_p50_ms $tch ms"
  echo "bench ${tag}_seq${seq}_torch_p99_ms $(pctl 99 "$work/torch.txt") ms"
  echo "bench ${tag}_seq${seq}/ort $(ratio "$ours" "$ort") x"
  echo "bench ${tag}_seq${seq}/torch $(ratio "$ours" "$tch") x"
  cat "$work"/ours_odd.[0-9]* > "$work/ours_odd.txt"; cat "$work"/ort_odd.[0-9]* > "$work/ort_odd.txt"
  local oo=$(pctl 50 "$work/ours_odd.txt") ro=$(pctl 50 "$work/ort_odd.txt")
  echo "bench ${tag}_seq${seq_odd}_p50_ms $oo ms"
  echo "bench ${tag}_seq${seq_odd}_ort_p50_ms $ro ms"
  echo "bench ${tag}_seq${seq_odd}/ort $(ratio "$oo" "$ro") x"
  mkdir -p "$out_dir"
  "$tuner" plot-latency -o "$out_dir/bench_${name}_latency.png" --title "$name, seq $seq, batch 1, $th threads: $requests requests each ($torch_requests of PyTorch)" \
    "ours (library)=$work/ours.txt" "onnxruntime=$work/ort.txt" "pytorch=$work/torch.txt" | sed 's/^/# /' >&2
}

for model in $models; do
  $py scripts/make_models.py --out "$work" "$model" >/dev/null || { echo "bench-model: cannot make $model" >&2; status=1; continue; }
  name=${model#tv_}
  case $model in
    tv_bert_base|tv_bert_small) bench_bert "$model" "$name" ;;
    *) bench_one "$model" "$name" 2
       [ "$model" = tv_resnet18 ] && bench_one "$model" "$name" 1
       [ "$model" = tv_mobilenet_v2 ] && bench_pretrained "$model" "$name" 2 "$work/resnet18_2t.db" ;;
  esac
done

exit $status
