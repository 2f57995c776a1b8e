#!/usr/bin/env bash
# Run every test executable under BUILD/tests (each in its own process, with a
# deadline), print each result and a summary; exit non-zero if any failed.
#   scripts/run_tests.sh build/san [FILTER]
# AT_TEST_LONG=1 selects the long stress cases inside the tests that have them.
# AT_TEST_JOBS=N runs N tests at a time (default: the number of CPUs); the slowest known
# tests start first so that the others fill the remaining CPUs around them.  Every test
# makes its own temporary files and listens on ports the kernel picks, so they do not meet.
set -uo pipefail
build=${1:-build/san}
filter=${2:-}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$(pwd)/scripts/lsan.supp:print_suppressions=0}
# the slowest test takes about 260 s; in test-long, test_space about 8 minutes alone
if [ -n "${AT_TEST_LONG:-}" ]; then timeout_s=${AT_TEST_TIMEOUT:-1800}; else timeout_s=${AT_TEST_TIMEOUT:-900}; fi
jobs=${AT_TEST_JOBS:-$(nproc)}
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "run_tests.sh: AT_TEST_JOBS must be a number >= 1, not '$jobs'" >&2; exit 2; }
# Tests whose assertions rest on measured speed (the cost model's ranking accuracy, a tuning
# run's improvement) run alone, first; then the others, AT_TEST_JOBS at a time, the slowest
# first (longest processing time first keeps the CPUs busy to the end).
alone=(cost_model/test_model tuner/test_tune)
slow=(kernels/test_space models/test_run kernels/test_schedules fleet/test_integration)
start=$(date +%s)
results=$(mktemp -d) || exit 1
trap 'rm -rf "$results"' EXIT

mapfile -t found < <(find "$build/tests" -type f -executable -name 'test_*' | sort)
alone_tests=(); tests=()
for s in "${alone[@]}"; do
  for t in "${found[@]}"; do [ "$t" = "$build/tests/$s" ] && alone_tests+=("$t"); done
done
for s in "${slow[@]}"; do
  for t in "${found[@]}"; do [ "$t" = "$build/tests/$s" ] && tests+=("$t"); done
done
for t in "${found[@]}"; do
  name=${t#"$build/tests/"}
  [[ " ${slow[*]} ${alone[*]} " == *" $name "* ]] || tests+=("$t")
done

# fail_excerpt LOG: what a failed test said where it failed (the 20 lines up to its first
# failed assertion or sanitizer report and 6 after), the lines that name every failed
# case, and the log's last 8 lines: a short excerpt that still names the cause when the
# failure comes early in a long log.
fail_excerpt() {
  local log=$1 first
  first=$(grep -n -m1 -E '^\[  (ERROR|FAILED) +\] --- |: error: Failure|ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$log" | cut -d: -f1)
  if [ -n "$first" ]; then
    echo "-- first failure, line $first of the log:"
    sed -n "$(( first > 20 ? first - 20 : 1 )),$(( first + 6 ))p" "$log"
    echo "-- failed cases:"
    grep -E '^\[  (FAILED|ERROR) +\]' "$log" | head -n 12
    echo "-- the log's end:"
  fi
  tail -n 8 "$log"
}

# run_one TEST: run it, then print its result in one write (lines of parallel tests do not mix)
run_one() {
  local t=$1 name log t0 rc dms dt out
  name=${t#"$build/tests/"}
  log="$build/logs/$name.log"; mkdir -p "$(dirname "$log")"
  t0=$(date +%s%N)
  timeout --kill-after=10 "$timeout_s" "$t" >"$log" 2>&1
  rc=$?
  dms=$(( ($(date +%s%N) - t0) / 1000000 )); dt=$(printf '%d.%d' $((dms/1000)) $(((dms%1000)/100)))
  if [ $rc -eq 0 ]; then
    out=$(printf 'PASS %-40s %6ss  %s' "$name" "$dt" "$(grep -E '^\[  PASSED  \]|SKIP' "$log" | tr '\n' ' ' | head -c 80)")
  else
    out=$(printf 'FAIL %-40s %6ss  (rc %d, log %s)\n%s' "$name" "$dt" "$rc" "$log" "$(fail_excerpt "$log" | sed 's/^/    /')")
  fi
  printf '%s\n' "$out"
  echo "$rc" > "$results/${name//\//_}"
}

for t in "${alone_tests[@]}"; do
  name=${t#"$build/tests/"}
  [ -n "$filter" ] && [[ "$name" != *"$filter"* ]] && continue
  run_one "$t"
done
running=0
for t in "${tests[@]}"; do
  name=${t#"$build/tests/"}
  [ -n "$filter" ] && [[ "$name" != *"$filter"* ]] && continue
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
  run_one "$t" &
  running=$((running + 1))
done
wait

pass=0; fail=0; failed=()
for f in "$results"/*; do
  [ -e "$f" ] || continue
  if [ "$(cat "$f")" = 0 ]; then pass=$((pass+1)); else fail=$((fail+1)); failed+=("$(basename "$f" | sed 's/_test_/\/test_/')"); fi
done
echo "summary: $pass passed, $fail failed, $(( $(date +%s) - start ))s ($jobs at a time)"
[ $fail -eq 0 ] || { echo "failed: ${failed[*]}"; exit 1; }
[ $pass -gt 0 ] || { echo "no tests ran (build: $build, filter: '$filter')"; exit 1; }
