#!/usr/bin/env bash
# 'make demo': a real tuning job on this machine with the embedded defaults (an in-process
# tracker and agent, the SQLite store tuning.db in the working directory), then the
# best-schedule query and the tuning curve.
#   DEMO_TRIALS=N make demo      a longer or shorter job (default 256)
set -euo pipefail
cd "$(dirname "$0")/.."
T=build/rel/bin/tuner
trials=${DEMO_TRIALS:-256}
spec="matmul:M=512,N=512,K=512"
echo "== tuning $spec: $trials trials, measured here by the embedded agent =="
$T --trials "$trials" --db tuning.db "$spec"
key=$($T best --db tuning.db --json | /usr/bin/python3 -c '
import json, sys
rows = [r for r in json.load(sys.stdin)["results"] if r["flops"] == 2 * 512 ** 3]
print(rows[0]["workload_key"] if rows else "")' 2>/dev/null || true)
echo
echo "== the best schedules in tuning.db (tuner best) =="
if [ -n "$key" ]; then $T best --db tuning.db --task "$key" --top 3; else $T best --db tuning.db --top 3; fi
if [ -n "$key" ]; then
  echo
  $T plot --db tuning.db --task "$key" -o tuning_curve.png
  echo "tuning curve: tuning_curve.png (also: tuner plot --db tuning.db --task $key -o curve.svg)"
fi
