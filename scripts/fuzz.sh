#!/usr/bin/env bash
# Run every fuzz target of build/fuzz for a bounded time ('make fuzz-short' from 'make test',
# 'make fuzz-long' from 'make test-long'):
#   scripts/fuzz.sh short|long
# Seeds: tests/tools/wire_seeds writes one valid frame of every message type; each target
# keeps its corpus in build/fuzz/corpus/<target> between runs.  A crash leaves its input in
# build/fuzz/crash-* and fails the run.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-short}
case "$mode" in
  short) runs=40000; secs=12 ;;
  long)  runs=100000000; secs=${AT_FUZZ_SECONDS:-180} ;;
  *) echo "usage: scripts/fuzz.sh short|long" >&2; exit 2 ;;
esac
seeds=build/fuzz/seeds
build/san/tests/tools/wire_seeds "$seeds" >/dev/null || { echo "fuzz: cannot write seeds" >&2; exit 1; }
# the targets run AT_FUZZ_JOBS (default: the CPUs) at a time; each prints its line when done
jobs=${AT_FUZZ_JOBS:-$(nproc)}
results=$(mktemp -d) || exit 1
trap 'rm -rf "$results"' EXIT
run_target() {
  local t=$1 name corpus seed stack log start rc execs out
  name=$(basename "$t")
  corpus=build/fuzz/corpus/$name
  mkdir -p "$corpus"
  case "$name" in
    fuzz_wire) seed=$seeds/wire ;;
    fuzz_session) seed=$seeds/session ;;
    fuzz_key) seed=$seeds/key ;;
    *) seed= ;;
  esac
  # the parsers of text run with a 2 MiB stack: recursion that input can deepen without a
  # limit crashes here (the DAG parser's limits are docs/dag_format.md's)
  stack=unlimited
  case "$name" in fuzz_dag|fuzz_tasks|fuzz_state) stack=2048 ;; esac
  log=build/fuzz/$name.log
  start=$(date +%s)
  ( [ "$stack" = unlimited ] || ulimit -s "$stack"
    ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
    exec "$t" -runs=$runs -max_total_time=$secs -max_len=65536 -rss_limit_mb=2048 \
         -artifact_prefix=build/fuzz/crash-$name- "$corpus" $seed ) >"$log" 2>&1
  rc=$?
  # libFuzzer's closing "Done N runs", else its last status line ("#N ..." at a line's start:
  # the dictionary it prints at the end may hold a '#' followed by digits too)
  execs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log" | tail -1)
  [ -z "$execs" ] && execs=$(grep -Eo '^#[0-9]+' "$log" | tail -1 | tr -d '#')
  if [ $rc -eq 0 ]; then
    out=$(printf 'PASS fuzz/%-32s %5ss  %s inputs' "$name" "$(( $(date +%s) - start ))" "${execs:-?}")
  else
    out=$(printf 'FAIL fuzz/%-32s (rc %d, log %s)\n%s' "$name" "$rc" "$log" "$(tail -n 30 "$log" | sed 's/^/    /')")
  fi
  printf '%s\n' "$out"
  echo "$rc" > "$results/$name"
}
running=0
for t in build/fuzz/fuzz_*; do
  [ -x "$t" ] || continue
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
  run_target "$t" &
  running=$((running + 1))
done
wait
status=0
for f in "$results"/*; do
  [ -e "$f" ] || continue
  [ "$(cat "$f")" = 0 ] || status=1
done
exit $status
