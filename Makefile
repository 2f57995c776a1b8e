# Top-level Makefile of the auto-tuner.
#
#   make            build the release tree (build/rel): libraries and commands
#   make deps       install the Debian packages that are missing (idempotent)
#   make demo       deps + build + run a real job on the embedded default
#   make test       deps + sanitizer build (build/san) + the whole test suite
#   make test-long  slow stress cases (not part of 'make test')
#   make bench      deps + release build + benchmarks (lines "bench NAME VALUE UNIT")
#   make gpu-bundle the GPU check's folder, without LLVM (build/gpu-bundle; docs/gpu.md)
#   make clean
#
# Each module is a folder; every .c in it goes into the module's archive, except
# main.c, which is the module's command.  Tests are tests/<module>/test_*.c, one
# executable each.  Dependencies come from the compiler (-MMD -MP).

SHELL       := /bin/bash
CC          ?= gcc
LLVM_CONFIG ?= llvm-config-16
CUDA_HOME   ?= /usr/local/cuda
V           ?= 0
Q           := $(if $(filter 1,$(V)),,@)

WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wundef -Wwrite-strings
LLVM_INC := $(shell $(LLVM_CONFIG) --includedir 2>/dev/null)
BASE_CFLAGS := -std=c11 $(WARN) -D_GNU_SOURCE -I. -fPIC -MMD -MP \
               $(if $(LLVM_INC),-isystem $(LLVM_INC))
REL_CFLAGS := -O2 -g $(if $(filter 1,$(DEBUG)),,-DNDEBUG)
SAN_CFLAGS := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined \
              -fno-omit-frame-pointer

LLVM_LIBS := $(shell $(LLVM_CONFIG) --ldflags 2>/dev/null) $(shell $(LLVM_CONFIG) --libs 2>/dev/null)
LDLIBS    := -Wl,--as-needed $(LLVM_LIBS) -lsqlite3 -lxgboost -lnng -luv -lmsgpackc -lmbedcrypto -lcairo -lseccomp \
             -lm -lpthread -ldl
TEST_LIBS := -lcmocka -lopenblas -ldnnl

# CUDA is detected, not required (docs/gpu.md): with NVRTC's header in $(CUDA_HOME) the
# "cuda" backend (kernels/kn_nvrtc.c) is built and kn_backend.c registers it; NVRTC itself
# is loaded at run time (dlopen), so nothing links against the toolkit.  Without it the
# project builds and every test passes; the GPU tests say what they skipped.
HAVE_CUDA   := $(if $(wildcard $(CUDA_HOME)/include/nvrtc.h),1,)
CUDA_SRCS   := kernels/kn_nvrtc.c
NO_CUDA_OUT := $(if $(HAVE_CUDA),,$(CUDA_SRCS))

# Modules in link order (users before what they use).
MODULES := tuner models cost_model records tracker rpc_agent kernels kernels/rt schedule_space common
lib_of   = $(subst /,_,$(1))
mod_srcs = $(filter-out $(1)/main.c $(NO_CUDA_OUT),$(wildcard $(1)/*.c))

# ---- per-flavour rules: $(1) = flavour name (rel/san), $(2) = extra CFLAGS ----
define FLAVOUR
B_$(1)      := build/$(1)
LIBS_$(1)   := $$(foreach m,$$(MODULES),$$(if $$(call mod_srcs,$$(m)),build/$(1)/lib/lib$$(call lib_of,$$(m)).a))

build/$(1)/obj/%.o: %.c
	@mkdir -p $$(@D)
	$$(Q)echo "  CC[$(1)] $$<"; $$(CC) $$(BASE_CFLAGS) $(2) -c $$< -o $$@

$$(foreach m,$$(MODULES),$$(eval build/$(1)/lib/lib$$(call lib_of,$$(m)).a: $$(patsubst %.c,build/$(1)/obj/%.o,$$(call mod_srcs,$$(m)))))

build/$(1)/lib/%.a:
	@mkdir -p $$(@D)
	$$(Q)rm -f $$@; ar rcs $$@ $$^

build/$(1)/bin/%: build/$(1)/obj/%/main.o $$(LIBS_$(1))
	@mkdir -p $$(@D)
	$$(Q)echo "  LD[$(1)] $$@"; $$(CC) $(2) -o $$@ $$< $$(LIBS_$(1)) $$(LDLIBS)

SUPPORT_$(1) := $$(patsubst %.c,build/$(1)/obj/%.o,$$(wildcard tests/support/*.c))

build/$(1)/tests/%: build/$(1)/obj/tests/%.o $$(SUPPORT_$(1)) $$(LIBS_$(1))
	@mkdir -p $$(@D)
	$$(Q)echo "  LD[$(1)] $$@"; $$(CC) $(2) -o $$@ $$< $$(SUPPORT_$(1)) $$(LIBS_$(1)) $$(TEST_LIBS) $$(LDLIBS)
endef

$(eval $(call FLAVOUR,rel,$(REL_CFLAGS)))
$(eval $(call FLAVOUR,san,$(SAN_CFLAGS)))

# The tests print paths into PATH_MAX buffers; -O2's truncation analysis (the rel flavour)
# cannot see the bound of a temporary directory's name and would fail 'make tests-rel'.
build/rel/obj/tests/%.o: BASE_CFLAGS += -Wno-format-truncation

ifneq ($(HAVE_CUDA),)
build/rel/obj/kernels/kn_nvrtc.o build/san/obj/kernels/kn_nvrtc.o: BASE_CFLAGS += -isystem $(CUDA_HOME)/include
build/rel/obj/kernels/kn_backend.o build/san/obj/kernels/kn_backend.o: BASE_CFLAGS += -DHAVE_CUDA
endif
# A build with CUDA and one without must not share objects: build/.cuda-flag changes when
# the choice does, and the objects that depend on it are rebuilt.
CUDA_FLAG := build/.cuda-flag
$(shell mkdir -p build; echo $(if $(HAVE_CUDA),yes,no) | cmp -s - $(CUDA_FLAG) || \
        echo $(if $(HAVE_CUDA),yes,no) > $(CUDA_FLAG))
build/rel/obj/kernels/kn_backend.o build/san/obj/kernels/kn_backend.o: $(CUDA_FLAG)

COMMANDS   := $(foreach m,tuner tracker rpc_agent,$(if $(wildcard $(m)/main.c),$(m)))
TEST_SRCS  := $(wildcard tests/*/test_*.c)
TEST_NAMES := $(patsubst tests/%.c,%,$(TEST_SRCS))
BENCH_SRCS := $(wildcard tests/bench/bench_*.c)
TOOL_SRCS  := $(wildcard tests/tools/*.c)

.PHONY: all deps demo test test-long bench clean tests-san tests-rel
.SECONDARY:

.DEFAULT_GOAL := all
all: $(LIBS_rel) $(addprefix build/rel/bin/,$(COMMANDS)) \
     $(patsubst tests/%.c,build/rel/tests/%,$(TOOL_SRCS))

deps:
	$(Q)scripts/deps.sh

tests-san: $(LIBS_san) $(addprefix build/san/tests/,$(TEST_NAMES)) \
           $(patsubst tests/%.c,build/san/tests/%,$(TOOL_SRCS)) \
           $(addprefix build/san/bin/,$(COMMANDS))
tests-rel: all $(addprefix build/rel/tests/,$(TEST_NAMES))

test: deps
	$(Q)$(MAKE) --no-print-directory -j$$(nproc) tests-san
	$(Q)scripts/run_tests.sh build/san

test-long: deps
	$(Q)$(MAKE) --no-print-directory -j$$(nproc) tests-san
	$(Q)AT_TEST_LONG=1 scripts/run_tests.sh build/san

demo: deps
	$(Q)$(MAKE) --no-print-directory -j$$(nproc) all
	$(Q)scripts/demo.sh

bench: deps
	$(Q)$(MAKE) --no-print-directory -j$$(nproc) all $(patsubst tests/%.c,build/rel/tests/%,$(BENCH_SRCS))
	$(Q)scripts/bench.sh

# 'make bench-tune [TRIALS=N]': matmul 1024^3 and ResNet-50's 3x3 conv2d (NCHW, and NHWC as a
# tuned model runs it) tuned through a tracker and an agent on its own core, next to OpenBLAS,
# oneDNN and the peak (also run at the end of 'make bench'; BENCH_TUNE_TASKS="NAME ..." runs
# some of the tasks; docs/tuning.md).
TRIALS ?= 1000
.PHONY: bench-tune
bench-tune: deps
	$(Q)$(MAKE) --no-print-directory -j$$(nproc) all build/rel/tests/bench/bench_vendor
	$(Q)scripts/bench_tune.sh $(TRIALS)

# 'make bench-search [TRIALS=N] [PRE_TRIALS=M]': how many trials the search needs to find
# matmul 1024^3's and the ResNet conv2d's best, from scratch, starting from the other
# task's store and from the pre-training corpus (scripts/bench_search.sh; docs/tuning.md).
# About 20 minutes, and 11 more the first time on a host (measuring the corpus).
PRE_TRIALS ?= 300
.PHONY: bench-search
bench-search: deps
	$(Q)$(MAKE) --no-print-directory -j$$(nproc) all
	$(Q)TRIALS=$(TRIALS) PRE_TRIALS=$(PRE_TRIALS) scripts/bench_search.sh

# 'make bench-ranking': issue 16's ranking figures, bench_cost_model's held-out quality with
# the comparator (cm_cmp), the caches simulated to 3e6 accesses, the machine code read back
# and the pre-training corpus at 400 programs a workload, in a store of its own
# (build/rel/bench/corpus400.db, started from corpus.db when that exists, topped up by
# measuring the first time: about 8 more minutes) and the data set measured 4 times in all,
# the labels each program's fastest (--passes; the 3 more passes kept in
# build/rel/bench/cost_model_pass2-4.db, about 8 minutes the first time); about an hour on
# 2 cores, nearly all of it simulating and building the 6,800 records (docs/cost_model.md,
# "The comparator" and "Labels").
.PHONY: bench-ranking
bench-ranking: deps
	$(Q)$(MAKE) --no-print-directory -j$$(nproc) all build/rel/tests/bench/bench_cost_model
	$(Q)mkdir -p build/rel/bench
	$(Q)if [ ! -f build/rel/bench/corpus400.db ] && [ -f build/rel/bench/corpus.db ]; then \
	  sqlite3 build/rel/bench/corpus.db ".backup build/rel/bench/corpus400.db"; fi
	$(Q)build/rel/tests/bench/bench_cost_model --quality-only --cmp --code --sim \
	  --sim-cap 3e6 --corpus 400 --corpus-db build/rel/bench/corpus400.db

clean:
	rm -rf build

-include $(shell find build -name '*.d' 2>/dev/null)

# ---- aarch64 runtime (kernels/rt) ----
# 'make rt-aarch64' cross-builds the kernel runtime with common/ and the command-line
# runner tests/tools/kn_rt_run.c into one static aarch64 binary, build/aarch64/bin/kn_rt_run,
# which tests run under qemu-aarch64 (tests/kernels/test_rt_aarch64.c).  Only the runtime
# half of kernels/ goes in: no LLVM, no SQLite; of the arm64 libraries only mbed TLS's
# libmbedcrypto.a (common/at_hash.c's SHA-256).  A common/ file that needs another
# third-party library goes in A64_COMMON_SKIP.
A64_CC          ?= aarch64-linux-gnu-gcc
A64_CFLAGS      := -std=c11 $(WARN) -D_GNU_SOURCE -I. -O2 -MMD -MP
A64_COMMON_SKIP := common/at_wire.c common/at_wire_auth.c common/at_wire_client.c
A64_SRCS        := $(filter-out $(A64_COMMON_SKIP),$(wildcard common/*.c)) \
                   $(wildcard kernels/rt/*.c) tests/tools/kn_rt_run.c
A64_OBJS        := $(patsubst %.c,build/aarch64/obj/%.o,$(A64_SRCS))

build/aarch64/obj/%.o: %.c
	@mkdir -p $(@D)
	$(Q)echo "  CC[aarch64] $<"; $(A64_CC) $(A64_CFLAGS) -c $< -o $@

build/aarch64/bin/kn_rt_run: $(A64_OBJS)
	@mkdir -p $(@D)
	$(Q)echo "  LD[aarch64] $@"; $(A64_CC) -static -O2 -o $@ $^ $(A64_LIBDIR)/libmbedcrypto.a \
	    -lm -lpthread

.PHONY: rt-aarch64
rt-aarch64: build/aarch64/bin/kn_rt_run
tests-san: rt-aarch64
# ---- end of aarch64 runtime ----

# ---- aarch64 agent (rpc_agent) ----
# 'make agent-aarch64' cross-builds the measuring agent for aarch64 Linux (phones, boards)
# into one static file, build/aarch64/bin/rpc_agent: common/ (wire protocol included),
# the kernel runtime and rpc_agent/, linked against Debian's arm64 multiarch archives of
# nng (with mbed TLS), msgpack-c and libseccomp ('make deps' installs them).  glibc is
# static too, so the agent takes numeric tracker addresses (no name service in a static
# glibc); docs/fleet.md says how to deploy it.
A64_LIBDIR      := /usr/lib/aarch64-linux-gnu
A64_AGENT_SRCS  := $(wildcard common/*.c) $(wildcard kernels/rt/*.c) $(wildcard rpc_agent/*.c)
A64_AGENT_OBJS  := $(patsubst %.c,build/aarch64/obj/%.o,$(A64_AGENT_SRCS))
A64_AGENT_LIBS  := $(A64_LIBDIR)/libnng.a $(A64_LIBDIR)/libmbedtls.a $(A64_LIBDIR)/libmbedx509.a \
                   $(A64_LIBDIR)/libmbedcrypto.a $(A64_LIBDIR)/libmsgpackc.a \
                   $(A64_LIBDIR)/libseccomp.a -lm -lpthread

build/aarch64/bin/rpc_agent: $(A64_AGENT_OBJS)
	@mkdir -p $(@D)
	$(Q)echo "  LD[aarch64] $@"; $(A64_CC) -static -O2 -o $@ $^ $(A64_AGENT_LIBS) 2>&1 | \
	    grep -v 'statically linked applications requires at runtime' | grep -v 'in function' || true
	$(Q)test -x $@

.PHONY: agent-aarch64
agent-aarch64: build/aarch64/bin/rpc_agent
tests-san: agent-aarch64
# ---- end of aarch64 agent ----

# ---- fuzzing (tests/fuzz) ----
# Every decoder of outside data has a libFuzzer target in tests/fuzz/fuzz_*.c, built with
# clang-14 -fsanitize=fuzzer,address,undefined over common/ into build/fuzz/.  'make test'
# runs each briefly (scripts/fuzz.sh short: bounded runs and seconds), 'make test-long'
# longer; seeds come from tests/tools/wire_seeds.  'make fuzz' only builds them.
FUZZ_CC     ?= clang-14
FUZZ_CFLAGS := -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. \
               $(filter-out -Werror,$(WARN))
FUZZ_SRCS   := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BINS   := $(patsubst tests/fuzz/%.c,build/fuzz/%,$(FUZZ_SRCS))
FUZZ_OBJS   := $(patsubst %.c,build/fuzz/obj/%.o,$(wildcard common/*.c))
FUZZ_LIBS   := -lmsgpackc -lnng -lmbedcrypto -lm -lpthread

build/fuzz/obj/%.o: %.c
	@mkdir -p $(@D)
	$(Q)echo "  CC[fuzz] $<"; $(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@

build/fuzz/%: tests/fuzz/%.c $(FUZZ_OBJS)
	@mkdir -p $(@D)
	$(Q)echo "  FUZZ $@"; $(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< $(FUZZ_OBJS) $(FUZZ_LIBS)

.PHONY: fuzz fuzz-short fuzz-long
fuzz: $(FUZZ_BINS)
fuzz-short:
	$(Q)$(MAKE) --no-print-directory -j$$(nproc) fuzz build/san/tests/tools/wire_seeds
	$(Q)scripts/fuzz.sh short
fuzz-long:
	$(Q)$(MAKE) --no-print-directory -j$$(nproc) fuzz build/san/tests/tools/wire_seeds
	$(Q)scripts/fuzz.sh long
test: fuzz-short
test-long: fuzz-long
# ---- end of fuzzing ----

# ---- install ----
# 'make install PREFIX=/usr/local [DESTDIR=...]': the three commands, the systemd units
# (scripts/autotune-*.service, @PREFIX@ filled in) and the fleet documents.
PREFIX  ?= /usr/local
DESTDIR ?=
.PHONY: install
install: all
	$(Q)install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/systemd/system \
	    $(DESTDIR)$(PREFIX)/share/doc/autotune
	$(Q)install -m 0755 $(addprefix build/rel/bin/,$(COMMANDS)) $(DESTDIR)$(PREFIX)/bin/
	$(Q)for u in scripts/autotune-tracker.service scripts/autotune-agent@.service; do \
	    sed 's|@PREFIX@|$(PREFIX)|g' $$u > $(DESTDIR)$(PREFIX)/lib/systemd/system/$$(basename $$u) && \
	    chmod 0644 $(DESTDIR)$(PREFIX)/lib/systemd/system/$$(basename $$u); done
	$(Q)install -m 0644 docs/fleet.md docs/protocol.md docs/security.md \
	    $(DESTDIR)$(PREFIX)/share/doc/autotune/
	$(Q)echo "installed tracker, rpc_agent, tuner in $(DESTDIR)$(PREFIX)/bin and the systemd units"
# ---- end of install ----

# ---- models: ONNX import, export-lib, bench-model (models/md_onnx.c, md_export.c) ----
# The ONNX schema is Debian's (libonnx-dev ships /usr/include/onnx/onnx.proto): protoc-c
# compiles it at build time into build/gen/onnx-c/ (no schema is kept in the repository).
# The generated C is not ours: it goes into libmodels.a of each flavour compiled with relaxed
# warnings, and only models/md_onnx.c sees its header, through -isystem so that our -Werror
# flags do not apply to it.  docs/models.md describes what is built on it.
ONNX_PROTO ?= /usr/include/onnx/onnx.proto
PB_DIR     := build/gen/onnx-c
PB_C       := $(PB_DIR)/onnx.pb-c.c
PB_H       := $(PB_DIR)/onnx.pb-c.h
PB_CFLAGS  := -std=c11 -D_GNU_SOURCE -fPIC -Wall -Wno-unused-parameter -I$(PB_DIR)
LDLIBS     += -lprotobuf-c

$(PB_C) $(PB_H) &: $(ONNX_PROTO)
	@mkdir -p $(PB_DIR)
	$(Q)echo "  PROTOC-C $<"; protoc-c --proto_path=$(dir $<) --c_out=$(PB_DIR) $(notdir $<)

define ONNX_PB
build/$(1)/obj/gen/onnx.pb-c.o: $(PB_C) $(PB_H)
	@mkdir -p $$(@D)
	$$(Q)echo "  CC[$(1)] $$<"; $$(CC) $$(PB_CFLAGS) $(2) -c $$< -o $$@
build/$(1)/lib/libmodels.a: build/$(1)/obj/gen/onnx.pb-c.o
build/$(1)/obj/models/md_onnx.o: $(PB_H)
build/$(1)/obj/models/md_onnx.o: BASE_CFLAGS += -isystem $(PB_DIR)
endef
$(eval $(call ONNX_PB,rel,$(REL_CFLAGS)))
$(eval $(call ONNX_PB,san,$(SAN_CFLAGS)))

# Fuzz targets of the decoders (the fuzzing section builds and runs tests/fuzz/fuzz_*.c):
# fuzz_onnx (decoding, checks, shape inference, folding, rewrites) and fuzz_tasks (the tasks
# JSONL reader), with their own sources; their corpora start from small generated models
# and the task list of one (build/fuzz/corpus/NAME, which scripts/fuzz.sh uses).
FUZZ_ONNX_OBJS  := $(patsubst %.c,build/fuzz/obj/%.o,models/md_onnx.c models/md_graph.c \
                     models/md_infer.c models/md_rewrite.c) build/fuzz/obj/gen/onnx.pb-c.o
FUZZ_TASKS_OBJS := $(patsubst %.c,build/fuzz/obj/%.o,models/md_tasks.c $(wildcard schedule_space/*.c))
FUZZ_DAG_OBJS   := $(patsubst %.c,build/fuzz/obj/%.o,$(wildcard schedule_space/*.c))

build/fuzz/obj/models/md_onnx.o: $(PB_H)
build/fuzz/obj/models/md_onnx.o: FUZZ_CFLAGS += -isystem $(PB_DIR)
build/fuzz/obj/gen/onnx.pb-c.o: $(PB_C) $(PB_H)
	@mkdir -p $(@D)
	$(Q)echo "  CC[fuzz] $<"; $(FUZZ_CC) -std=c11 -g -O1 -fsanitize=fuzzer-no-link,address,undefined \
	    -w -I$(PB_DIR) -c $< -o $@

build/fuzz/corpus/fuzz_onnx/.seeded: scripts/make_models.py
	@mkdir -p $(@D)
	$(Q)/usr/bin/python3 scripts/make_models.py --out $(@D) seed_cnn seed_attention tiny_mlp missing_input \
	    >/dev/null && touch $@
build/fuzz/corpus/fuzz_tasks/.seeded: build/fuzz/corpus/fuzz_onnx/.seeded build/rel/bin/tuner
	@mkdir -p $(@D)
	$(Q)build/rel/bin/tuner tasks -q -o $(@D)/seed_cnn.jsonl build/fuzz/corpus/fuzz_onnx/seed_cnn.onnx
	$(Q)build/rel/bin/tuner tasks -q -o $(@D)/seed_attention.jsonl \
	    build/fuzz/corpus/fuzz_onnx/seed_attention.onnx && touch $@

build/fuzz/fuzz_onnx: tests/fuzz/fuzz_onnx.c $(FUZZ_OBJS) $(FUZZ_ONNX_OBJS) \
                      | build/fuzz/corpus/fuzz_onnx/.seeded
	@mkdir -p $(@D)
	$(Q)echo "  FUZZ $@"; $(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< $(FUZZ_ONNX_OBJS) $(FUZZ_OBJS) \
	    -lprotobuf-c $(FUZZ_LIBS)
# fuzz_dag: the DAG parser; seeds: a few DAGs and the deep inputs that once crashed it
build/fuzz/corpus/fuzz_dag/.seeded: scripts/dag_seeds.py
	@mkdir -p $(@D)
	$(Q)python3 scripts/dag_seeds.py $(@D) && touch $@
build/fuzz/fuzz_dag: tests/fuzz/fuzz_dag.c $(FUZZ_OBJS) $(FUZZ_DAG_OBJS) \
                     | build/fuzz/corpus/fuzz_dag/.seeded
	@mkdir -p $(@D)
	$(Q)echo "  FUZZ $@"; $(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< $(FUZZ_DAG_OBJS) $(FUZZ_OBJS) \
	    $(FUZZ_LIBS)
# fuzz_state: the schedule state decoder ('tuner measure --state', a store's records); seeds:
# the naive state, a split and cache-write of the matmul and the NCHW convolution's
# hand-written schedule (kn_hand_conv_nchw) on the target's two DAGs
build/fuzz/corpus/fuzz_state/.seeded:
	@mkdir -p $(@D)
	$(Q)printf '%s' '{"v":1,"steps":[]}' > $(@D)/naive.json
	$(Q)printf '%s' '{"v":1,"steps":[["CHW",2,"local"],["SP",2,0,64,[4,2],1],["RE",2,[1,0,2,3,4]],["CA",2,3,1]]}' \
	    > $(@D)/matmul.json
	$(Q)printf '%s' '{"v":1,"steps":[["CHW",3,"local"],["FU",2,[0,1,2]],["AN",2,0,3],["AN",2,1,2],["SP",4,3,14,[14],1],["SP",4,1,16,[16],1],["RE",4,[0,1,3,4,2,5]],["FU",4,[0,1,2,3]],["AN",4,0,3],["AN",4,2,2],["AN",4,1,1],["CA",3,4,0],["RE",3,[0,2,4,5,6,1,3]],["AN",3,6,2],["AN",3,5,1]]}' \
	    > $(@D)/conv.json && touch $@
build/fuzz/fuzz_state: tests/fuzz/fuzz_state.c $(FUZZ_OBJS) $(FUZZ_DAG_OBJS) \
                       | build/fuzz/corpus/fuzz_state/.seeded
	@mkdir -p $(@D)
	$(Q)echo "  FUZZ $@"; $(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< $(FUZZ_DAG_OBJS) $(FUZZ_OBJS) \
	    $(FUZZ_LIBS)
build/fuzz/fuzz_tasks: tests/fuzz/fuzz_tasks.c $(FUZZ_OBJS) $(FUZZ_TASKS_OBJS) \
                       | build/fuzz/corpus/fuzz_tasks/.seeded
	@mkdir -p $(@D)
	$(Q)echo "  FUZZ $@"; $(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< $(FUZZ_TASKS_OBJS) $(FUZZ_OBJS) \
	    $(FUZZ_LIBS)

# 'make bench-model [TRIALS=N] [MODELS=...]': ResNet-18 (2 threads and 1), MobileNetV2 and a
# 2-layer BERT-base-shaped encoder tuned with N trials each (default 1500), the exported
# library called from C, next to ONNX Runtime (a throwaway venv from PyPI) and PyTorch
# (Debian's) in the same run (scripts/bench_model.sh; docs/models.md).  About 28 minutes.
.PHONY: bench-model
bench-model:
	$(Q)scripts/deps.sh bench
	$(Q)$(MAKE) --no-print-directory -j$$(nproc) all
	$(Q)scripts/bench_model.sh
# ---- end of models ----

# ---- GPU bundle (docs/gpu.md) ----
# 'make gpu-bundle' builds tuner, tracker, rpc_agent and the GPU check's gpu_verify
# (tests/tools) without LLVM (-DAT_NO_LLVM: 'cuda' targets only, NVRTC loaded at run time)
# into build/nollvm/, then scripts/gpu_bundle.sh
# copies them with every shared library they need except glibc's (rpath $ORIGIN/../lib),
# scripts/gpu_check.sh and its vendor benchmark source into build/gpu-bundle/ (under 64 MiB).
# 'make test' runs scripts/gpu_bundle.sh --check on it: the binaries start with
# LD_LIBRARY_PATH at the bundle alone and every library resolves inside it.  Needs the CUDA
# toolkit's NVRTC header (CUDA_HOME); without it, the target says so and 'make test' skips.
# Only kn_target.c, kn_backend.c and cm_code.c differ without LLVM: every other object is the
# release build's (which 'make test' builds anyway), so the bundle costs three compiles and
# the links.
BUNDLE_CFLAGS := $(REL_CFLAGS) -DAT_NO_LLVM
BUNDLE_LDLIBS  = $(filter-out $(LLVM_LIBS),$(LDLIBS))
NOLLVM_OWN    := kernels/kn_target.c kernels/kn_backend.c cost_model/cm_code.c
bundle_srcs    = $(filter-out kernels/kn_llvm.c,$(call mod_srcs,$(1)))
nollvm_objs    = $(foreach f,$(1),$(if $(filter $(f),$(NOLLVM_OWN)),build/nollvm,build/rel)/obj/$(f:.c=.o))
LIBS_nollvm   := $(foreach m,$(MODULES),$(if $(call bundle_srcs,$(m)),build/nollvm/lib/lib$(call lib_of,$(m)).a))

build/nollvm/obj/%.o: %.c
	@mkdir -p $(@D)
	$(Q)echo "  CC[nollvm] $<"; $(CC) $(BASE_CFLAGS) $(BUNDLE_CFLAGS) -c $< -o $@
$(foreach m,$(MODULES),$(eval build/nollvm/lib/lib$(call lib_of,$(m)).a: $(call nollvm_objs,$(call bundle_srcs,$(m)))))
build/nollvm/lib/libmodels.a: build/rel/obj/gen/onnx.pb-c.o
build/nollvm/lib/%.a:
	@mkdir -p $(@D)
	$(Q)rm -f $@; ar rcs $@ $^
build/nollvm/bin/%: build/rel/obj/%/main.o $(LIBS_nollvm)
	@mkdir -p $(@D)
	$(Q)echo "  LD[nollvm] $@"; $(CC) -o $@ $< $(LIBS_nollvm) $(BUNDLE_LDLIBS) -Wl,-rpath,'$$ORIGIN/../lib'
build/nollvm/bin/gpu_verify: build/rel/obj/tests/tools/gpu_verify.o \
                            build/rel/obj/tests/support/ref_ops.o \
                            build/rel/obj/tests/support/gpu_emu.o $(LIBS_nollvm)
	@mkdir -p $(@D)
	$(Q)echo "  LD[nollvm] $@"; $(CC) -o $@ $(filter %.o,$^) $(LIBS_nollvm) $(BUNDLE_LDLIBS) \
	    -Wl,-rpath,'$$ORIGIN/../lib'
ifneq ($(HAVE_CUDA),)
build/nollvm/obj/kernels/kn_backend.o: BASE_CFLAGS += -DHAVE_CUDA
endif
build/nollvm/obj/kernels/kn_backend.o: $(CUDA_FLAG)

.PHONY: gpu-bundle gpu-bundle-check
ifneq ($(HAVE_CUDA),)
gpu-bundle: build/nollvm/bin/tuner build/nollvm/bin/tracker build/nollvm/bin/rpc_agent \
            build/nollvm/bin/gpu_verify
	$(Q)scripts/gpu_bundle.sh build/nollvm/bin build/gpu-bundle
gpu-bundle-check:
	$(Q)$(MAKE) --no-print-directory -j$$(nproc) gpu-bundle
	$(Q)scripts/gpu_bundle.sh --check build/gpu-bundle
else
gpu-bundle:
	@echo "make gpu-bundle needs the CUDA toolkit: no $(CUDA_HOME)/include/nvrtc.h (set CUDA_HOME)" >&2; exit 1
gpu-bundle-check:
	@echo "SKIP gpu-bundle (no CUDA toolkit in $(CUDA_HOME))"
endif
test: gpu-bundle-check
test-long: gpu-bundle-check
# ---- end of GPU bundle ----
