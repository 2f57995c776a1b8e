#!/bin/sh
# scripts/cm_study/run.sh SCRIPT.py -- the cost model's top-5 recall study (docs/cost_model.md,
# "Where top-5 recall stops"): not part of the product.  Dumps the feature rows of every
# record of the bench's data set and corpus (build/rel/bench/, measured by
# bench_cost_model) with dump.c, and runs SCRIPT.py (base.py, knob.py, lc.py, ins.py,
# insp.py, obj.py, obj2.py, reg.py, est.py, knn.py, stage2.py, noise.py, packsum.py,
# xgbparams.py, asm.py and mca.py (the last two first rebuild every program and
# disassemble it with asm.c; mca.py runs llvm-mca on each program's hottest loop), sim.py
# simasm.py, simlin.py, ens.py, cpc.py, lcsim.py and cmp.py (first every program's memory
# accesses through sim.c's cache model; the last four need asm.c's outputs too);
# withrun.py TXT,TXT DB,DB with dump
# outputs of tuning runs' stores) with XGBoost from PyPI in a throwaway venv.  mlp.py runs
# with Debian's torch on the dumps this leaves (see its head).
# Run from the repository root after 'make' and one bench_cost_model run.
set -e
out=${CM_STUDY_OUT:-/tmp/cm_study}
dir=${CM_STUDY_DIR:-build/rel/bench}
mkdir -p "$out"
L=build/rel/lib
cc -O2 -std=c11 -D_GNU_SOURCE -I. -o "$out/dump" scripts/cm_study/dump.c $L/libtuner.a \
    $L/libmodels.a $L/libcost_model.a $L/librecords.a $L/libkernels.a $L/libkernels_rt.a \
    $L/libschedule_space.a $L/libcommon.a -L/usr/lib/llvm-16/lib -lLLVM-16 -lsqlite3 \
    -lxgboost -lnng -luv -lmsgpackc -lmbedcrypto -lcairo -lseccomp -lm -lpthread -ldl
"$out/dump" "$dir/cost_model.db" names >"$out/ds.txt"
"$out/dump" "$dir/corpus.db" >"$out/corpus.txt"
[ -x "$out/venv/bin/python" ] || { python3 -m venv "$out/venv" && "$out/venv/bin/pip" install -q xgboost numpy; }
script=${1:-base.py}
[ $# -gt 0 ] && shift
if { [ "$script" = asm.py ] || [ "$script" = mca.py ] || [ "$script" = simasm.py ] ||
    [ "$script" = ens.py ] || [ "$script" = cpc.py ] || [ "$script" = lcsim.py ] ||
    [ "$script" = cmp.py ]; } &&
    { [ ! -s "$out/asm_ds.txt" ] || [ ! -d "$out/hot" ]; }; then
    # the machine code of every program (3,600 builds: about 3.5 minutes on 2 cores)
    cc -O2 -std=c11 -D_GNU_SOURCE -I. -I/usr/lib/llvm-16/include -o "$out/asm" \
        scripts/cm_study/asm.c $L/libkernels.a $L/libkernels_rt.a $L/librecords.a \
        $L/libschedule_space.a $L/libcommon.a -L/usr/lib/llvm-16/lib -lLLVM-16 -lsqlite3 \
        -lmsgpackc -lmbedcrypto -lm -lpthread -ldl
    rm -rf "$out/hot" "$out/mca.txt" && mkdir -p "$out/hot"
    export ASM_HOT_DIR="$out/hot"
    "$out/asm" "$dir/corpus.db" 2 0 >"$out/asm_cp0.txt" &
    "$out/asm" "$dir/corpus.db" 2 1 >"$out/asm_cp1.txt"
    wait
    "$out/asm" "$dir/cost_model.db" >"$out/asm_ds.txt"
    unset ASM_HOT_DIR
fi
if case $script in sim*.py|ens.py|cpc.py|lcsim.py|cmp.py) true ;; *) false ;; esac && [ ! -s "$out/sim_ds.txt" ]; then
    # every program's accesses through a model of the caches (sim.c; SIM_ARGS: cache sizes
    # and the sampling cap, default Zen 5's and 3e6; about 3 + 3 minutes)
    cc -O2 -std=c11 -D_GNU_SOURCE -I. -o "$out/sim" scripts/cm_study/sim.c $L/libkernels.a \
        $L/libkernels_rt.a $L/librecords.a $L/libschedule_space.a $L/libcommon.a \
        -L/usr/lib/llvm-16/lib -lLLVM-16 -lsqlite3 -lmsgpackc -lmbedcrypto -lm -lpthread -ldl
    # shellcheck disable=SC2086
    "$out/sim" "$dir/cost_model.db" $SIM_ARGS >"$out/sim_ds.txt"
    SIM_EVERY=2 SIM_FIRST=0 "$out/sim" "$dir/corpus.db" $SIM_ARGS >"$out/sim_cp0.txt" &
    SIM_EVERY=2 SIM_FIRST=1 "$out/sim" "$dir/corpus.db" $SIM_ARGS >"$out/sim_cp1.txt"
    wait
fi
CM_STUDY_OUT=$out CM_STUDY_DIR=$dir exec "$out/venv/bin/python" "scripts/cm_study/$script" "$@"
