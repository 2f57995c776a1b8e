#!/usr/bin/env bash
# Run every test executable under BUILD/tests (each in its own process, with a
# deadline), print each result and a summary; exit non-zero if any failed.
#   scripts/run_tests.sh build/san [FILTER]
# AT_TEST_LONG=1 selects the long stress cases inside the tests that have them.
set -uo pipefail
build=${1:-build/san}
filter=${2:-}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$(pwd)/scripts/lsan.supp:print_suppressions=0}
timeout_s=${AT_TEST_TIMEOUT:-600}
pass=0; fail=0; failed=()
start=$(date +%s)
mapfile -t tests < <(find "$build/tests" -type f -executable -name 'test_*' | sort)
for t in "${tests[@]}"; do
  name=${t#"$build/tests/"}
  [ -n "$filter" ] && [[ "$name" != *"$filter"* ]] && continue
  log="$build/logs/$name.log"; mkdir -p "$(dirname "$log")"
  t0=$(date +%s%N)
  timeout --kill-after=10 "$timeout_s" "$t" >"$log" 2>&1
  rc=$?
  dms=$(( ($(date +%s%N) - t0) / 1000000 )); dt=$(printf '%d.%d' $((dms/1000)) $(((dms%1000)/100)))
  if [ $rc -eq 0 ]; then
    pass=$((pass+1)); printf 'PASS %-40s %6ss  %s\n' "$name" "$dt" "$(grep -E '^\[  PASSED  \]|SKIP' "$log" | tr '\n' ' ' | head -c 80)"
  else
    fail=$((fail+1)); failed+=("$name")
    printf 'FAIL %-40s %6ss  (rc %d, log %s)\n' "$name" "$dt" "$rc" "$log"
    tail -n 30 "$log" | sed 's/^/    /'
  fi
done
echo "summary: $pass passed, $fail failed, $(( $(date +%s) - start ))s"
[ $fail -eq 0 ] || { echo "failed: ${failed[*]}"; exit 1; }
