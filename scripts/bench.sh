#!/usr/bin/env bash
# 'make bench': every benchmark program, one figure per line:
#   bench NAME VALUE UNIT          a measurement
#   bench NAME/REFERENCE RATIO x   a comparison measured in the same run
# Vendor references run with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (this machine's
# environment forces OpenBLAS onto slower AVX2 kernels otherwise).
set -uo pipefail
cd "$(dirname "$0")/.."
B=build/rel/tests/bench
status=0
run() {
  echo "# $*" >&2
  "$@" || { echo "bench: $1 failed" >&2; status=1; }
}
VENDOR="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE"
echo "# vendor references: $VENDOR OMP_NUM_THREADS=<threads>"
run $VENDOR OMP_NUM_THREADS=2 $B/bench_matmul --threads 2 --reps 7
run $VENDOR OMP_NUM_THREADS=1 $B/bench_vendor --threads 1 --reps 5
run $VENDOR OMP_NUM_THREADS=2 $B/bench_vendor --threads 2 --reps 5
for b in $B/bench_*; do
  case "$(basename "$b")" in
    bench_matmul|bench_vendor) ;;
    *) run "$b" ;;
  esac
done
# the tuning benchmark (the longest part; BENCH_TUNE=0 skips it, BENCH_TUNE_TRIALS=N)
if [ "${BENCH_TUNE:-1}" != 0 ]; then
  run scripts/bench_tune.sh "${BENCH_TUNE_TRIALS:-1000}"
fi
exit $status
