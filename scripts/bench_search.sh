#!/usr/bin/env bash
# 'make bench-search [TRIALS=N] [PRE_TRIALS=M]': how fast the search finds the best (issue 16,
# item 4), on the embedded default as a user runs it ('tuner --trials N --threads 2').
#
# For matmul 1024^3 and the ResNet conv2d (N=1, C=K=64, 56x56, 3x3, pad 1):
#   - from scratch: one run of TRIALS trials (default 1000) in an empty store: its best is the
#     reference; the best after 64 trials, and the trials it took to reach 90% and 100% of
#     its own final best;
#   - pre-trained on another task: a run of PRE_TRIALS trials (default 300) in a copy of the
#     *other* task's store (its records and the cost model that run saved, which the run
#     starts from: docs/tuning.md, "Learn"): the trials it took to reach 90% and 100% of the
#     from-scratch best, and its best after 64 trials.
#   - pre-trained on the corpus: a run of PRE_TRIALS trials in a copy of a store holding only
#     the pre-training corpus (CORPUS random states of each of its workloads, default 200,
#     none of them these tasks; 'tuner dataset --corpus', cached in CORPUS_DB, default
#     build/rel/bench/corpus.db, shared with bench_cost_model: about 11 minutes the first
#     time on a host), whose records the run trains its first model on: the same figures.
# Lines ("bench NAME VALUE UNIT"; a target not reached within the run prints its trials
# followed by '+', e.g. "300+"):
#   bench search_TASK_scratch_best G GFLOPS                  after TRIALS trials
#   bench search_TASK_scratch_best_64 G GFLOPS               after 64
#   bench search_TASK_scratch_best_64/scratch_best R x       issue 16 asks for >= 0.9
#   bench search_TASK_scratch_best_64/scratch_best_retimed R x   the same two programs timed
#                                            again side by side: 'tuner measure --state' in
#                                            RETIME_ROUNDS interleaved rounds (default 10), the
#                                            medians (a recorded best is the fastest of many
#                                            measurements, the 64-trial one of few); with
#                                            search_TASK_scratch_best_64_retimed_ms and _best_retimed_ms
#   bench search_TASK_scratch_trials_to_90pct N trials       and _to_100pct
#   bench search_TASK_pretrained_trials_to_90pct N trials    of the from-scratch best; _to_100pct
#   bench search_TASK_pretrained_best_64/scratch_best R x
#   bench search_TASK_corpus_trials_to_90pct N trials        the same, pre-trained on the corpus
#   bench search_TASK_corpus_best_64/scratch_best R x
#   bench search_TASK_scratch_s S s, search_TASK_pretrained_s S s, search_TASK_corpus_s S s
# Run it with nothing else on the machine: every kernel is timed here, on these cores.
set -uo pipefail
cd "$(dirname "$0")/.."
trials=${TRIALS:-1000}
pre_trials=${PRE_TRIALS:-300}
seed=${SEED:-1}
retime_rounds=${RETIME_ROUNDS:-10}
corpus=${CORPUS:-200}
corpus_db=${CORPUS_DB:-build/rel/bench/corpus.db}
tuner=build/rel/bin/tuner
[ -x "$tuner" ] || { echo "bench-search: build first (make)" >&2; exit 1; }
work=$(mktemp -d /tmp/bench_search.XXXXXX)
# KEEP=1 keeps the stores (the directory is printed)
if [ -n "${KEEP:-}" ]; then echo "# stores kept in $work" >&2; else trap 'rm -rf "$work"' EXIT; fi
echo "# cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs; $trials trials from scratch, $pre_trials pre-trained, seed $seed" >&2

names=(matmul1024 resnet_conv)
specs=("matmul:M=1024,N=1024,K=1024" "conv2d:N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1")
status=0

# tune NAME SPEC DB TRIALS OUT: one run; prints its wall seconds
tune() {
  local t0 t1
  t0=$(date +%s.%N)
  if ! "$tuner" --trials "$4" --threads 2 --seed "$seed" --db "$3" "$2" >"$5.out" 2>"$5.err"; then
    echo "bench-search: tuning $2 failed:" >&2; tail -5 "$5.err" >&2; status=1; return 1
  fi
  t1=$(date +%s.%N)
  grep -E '^cost model:|trials in|^time:' "$5.err" "$5.out" | sed "s/^[^:]*:/# $1: /" >&2
  python3 -c "print('%.0f' % ($t1 - $t0))"
}

# curve DB KEY: the task's trials as "trial cost" lines (failed trials cost 0), in trial order
curve() {
  "$tuner" history --db "$1" --task "$2" --json | python3 -c '
import json, sys
g = json.load(sys.stdin)["groups"][0]
print(g["flops"])
for p in g["points"]:
    print(p["trial"], p["cost"] if p["error_code"] == 0 else 0)'
}

# figures SCRATCH_CURVE PRE_CURVE NAME MODE (pretrained or corpus)
figures() {
  python3 - "$1" "$2" "$3" "$4" <<'EOF'
import sys
def load(path):
    lines = open(path).read().split("\n")
    flops = float(lines[0])
    pts = [tuple(map(float, l.split())) for l in lines[1:] if l.strip()]
    return flops, [c for _, c in sorted(pts)]
def bests(costs):
    b, out = float("inf"), []
    for c in costs:
        if c > 0 and c < b:
            b = c
        out.append(b)
    return out
def reach(b, target):
    for i, c in enumerate(b):
        if c <= target * (1 + 1e-9):
            return str(i + 1)
    return "%d+" % len(b)
flops, sc = load(sys.argv[1])
_, pc = load(sys.argv[2])
name, mode = sys.argv[3], sys.argv[4]
sb, pb = bests(sc), bests(pc)
best = sb[-1]
gf = lambda c: flops / c * 1e-9
b64 = sb[min(63, len(sb) - 1)]
if mode == "pretrained":  # the from-scratch lines once
    print(f"bench search_{name}_scratch_best {gf(best):.1f} GFLOPS")
    print(f"bench search_{name}_scratch_best_64 {gf(b64):.1f} GFLOPS")
    print(f"bench search_{name}_scratch_best_64/scratch_best {best / b64:.3f} x")
    print(f"bench search_{name}_scratch_trials_to_90pct {reach(sb, best / 0.9)} trials")
    print(f"bench search_{name}_scratch_trials_to_100pct {reach(sb, best)} trials")
print(f"bench search_{name}_{mode}_trials_to_90pct {reach(pb, best / 0.9)} trials")
print(f"bench search_{name}_{mode}_trials_to_100pct {reach(pb, best)} trials")
p64 = pb[min(63, len(pb) - 1)]
print(f"bench search_{name}_{mode}_best_64 {gf(p64):.1f} GFLOPS")
print(f"bench search_{name}_{mode}_best_64/scratch_best {best / p64:.3f} x")
print(f"bench search_{name}_{mode}_best {gf(pb[-1]):.1f} GFLOPS")
EOF
}

# retime I: the from-scratch run's best after 64 trials and its best, timed again side by
# side in RETIME_ROUNDS interleaved rounds (the same program twice when they are one)
retime() {
  local i=$1 n=${names[$1]} a b
  "$tuner" export --db "$work/$n.db" --quiet | python3 -c '
import json, sys
ok = [r for r in map(json.loads, filter(str.strip, sys.stdin))
      if r["error_code"] == 0 and r.get("trial") is not None]
print(min((r for r in ok if r["trial"] < 64), key=lambda r: r["mean"])["state"])
print(min(ok, key=lambda r: r["mean"])["state"])' >"$work/$n.states" ||
    { echo "bench-search: $n: no states to time again" >&2; status=1; return 0; }
  if ! "$tuner" measure --db "$work/retime.db" --threads 2 --rounds "$retime_rounds" \
       --state "$work/$n.states" "${specs[$i]}" >"$work/$n.retime" 2>&1; then
    echo "bench-search: $n: timing the bests again failed:" >&2; tail -3 "$work/$n.retime" >&2
    status=1; return 0
  fi
  sed -n 's/^.*\(state [12]\) .*rounds (ms[^:]*): /# '"$n"': the \1 of 2 timed again, rounds (ms): /p' \
    "$work/$n.retime" >&2
  a=$(sed -n 's/^.* state 1 *NO_ERROR *\([0-9.]*\) ms.*/\1/p' "$work/$n.retime")
  b=$(sed -n 's/^.* state 2 *NO_ERROR *\([0-9.]*\) ms.*/\1/p' "$work/$n.retime")
  if [ -z "$a" ] || [ -z "$b" ]; then
    echo "bench-search: $n: a best failed when timed again" >&2; status=1; return 0
  fi
  echo "bench search_${n}_scratch_best_64_retimed_ms $a ms"
  echo "bench search_${n}_scratch_best_retimed_ms $b ms"
  echo "bench search_${n}_scratch_best_64/scratch_best_retimed $(python3 -c "print('%.3f' % ($b / $a))") x"
}

# from scratch, both tasks first (each pre-trained run uses the other task's store)
for i in 0 1; do
  echo "# ${names[$i]}: ${specs[$i]}, $trials trials from scratch" >&2
  s=$(tune "${names[$i]}" "${specs[$i]}" "$work/${names[$i]}.db" "$trials" "$work/${names[$i]}") || continue
  echo "bench search_${names[$i]}_scratch_s $s s"
  retime "$i"
done
# pre_run I SOURCE_DB MODE WHAT: task I tuned PRE_TRIALS trials in a copy of SOURCE_DB, its
# curve against the from-scratch run's (MODE: pretrained or corpus; WHAT: for the log)
pre_run() {
  local i=$1 src=$2 mode=$3 what=$4 n=${names[$1]} key s
  [ -f "$work/$n.db" ] && [ -f "$src" ] || return 0
  # the task's workload key: the only task of its from-scratch store
  key=$("$tuner" history --db "$work/$n.db" --json |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["groups"][0]["workload_key"])')
  cp "$src" "$work/${n}_$mode.db"
  echo "# $n: $pre_trials trials in a copy of $what" >&2
  s=$(tune "$n" "${specs[$i]}" "$work/${n}_$mode.db" "$pre_trials" "$work/${n}_$mode") || return 0
  echo "bench search_${n}_${mode}_s $s s"
  if curve "$work/$n.db" "$key" >"$work/$n.curve" &&
     curve "$work/${n}_$mode.db" "$key" >"$work/${n}_$mode.curve"; then
    figures "$work/$n.curve" "$work/${n}_$mode.curve" "$n" "$mode"
  else
    echo "bench-search: no history for $n" >&2; status=1
  fi
}
for i in 0 1; do
  o=$((1 - i))
  pre_run "$i" "$work/${names[$o]}.db" pretrained "${names[$o]}'s store"
done
# pre-trained on the corpus (measured here once per host: records of this target count)
if [ "$corpus" -gt 0 ]; then
  mkdir -p "$(dirname "$corpus_db")"
  echo "# the corpus: $corpus random states of each workload in $corpus_db (measured once)" >&2
  if ! "$tuner" dataset --corpus "$corpus" --db "$corpus_db" --repeat 3 --no-check --threads 2 \
       >"$work/corpus.out" 2>"$work/corpus.err"; then
    echo "bench-search: measuring the corpus failed:" >&2; tail -5 "$work/corpus.err" >&2
    exit 1
  fi
  sed 's/^/# /' "$work/corpus.out" >&2
  for i in 0 1; do
    pre_run "$i" "$corpus_db" corpus "the corpus's store"
  done
fi
exit $status
