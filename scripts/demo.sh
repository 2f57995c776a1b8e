#!/usr/bin/env bash
# 'make demo': a real job on this machine with the embedded defaults.
# Until the tuner's search exists, it compiles library operators with their naive and
# hand-written schedules, checks them against each other and prints their speed.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== kernels: naive vs hand-written schedules (LLVM code generation, our loader) =="
build/rel/tests/tools/kn_demo --threads "$(nproc)"
echo
echo "== the same through the fleet: embedded tracker and sandboxed agent, results in tuning.db =="
build/rel/bin/tuner measure --db tuning.db matmul:M=512,N=512,K=512 softmax:M=256,N=1000 \
    layer_norm:M=256,N=768
